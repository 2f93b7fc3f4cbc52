# batchscope dashboard: python:3.11-slim, CPU torch, the pinned requirements, the app.
# docker-compose.yml runs it against PostgreSQL (migrations first, then serve).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/batchscope

# As in the Makefile: torch first and pinned (from the CPU wheel index: PyPI's default
# torch is a multi-GB CUDA build), then the lock file, then the app without deps.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
COPY requirements/lock.txt requirements/lock.txt
RUN pip install torch==2.13.0 --index-url "${TORCH_INDEX_URL}" \
 && pip install -r requirements/lock.txt

COPY pyproject.toml README.md alembic.ini ./
COPY engine engine
COPY app app
COPY migrations migrations
COPY scenarios scenarios
COPY static static
COPY templates templates
RUN pip install --no-deps --no-build-isolation -e . \
 && useradd --create-home --uid 10001 batchscope \
 && mkdir -p data && chown batchscope data
USER batchscope

EXPOSE 8000
# Migrations are their own command, run before serving (never on import).
CMD ["sh", "-c", "batchscope db upgrade && exec batchscope serve --host 0.0.0.0"]

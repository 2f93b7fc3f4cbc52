# batchscope dashboard: python:3.11-slim, CPU torch, the runtime lock (no dev tools), the
# app installed as a wheel (templates, static files, scenarios and migrations inside it).
# docker-compose.yml runs it against PostgreSQL (migrations first, then serve).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/batchscope

# As in the Makefile: torch first and pinned (from the CPU wheel index: PyPI's default
# torch is a multi-GB CUDA build), then the runtime lock, then the app without deps.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
COPY requirements/runtime.txt requirements/runtime.txt
RUN pip install torch==2.13.0 --index-url "${TORCH_INDEX_URL}" \
 && pip install -r requirements/runtime.txt

COPY pyproject.toml setup.py MANIFEST.in README.md alembic.ini /tmp/src/
COPY engine /tmp/src/engine
COPY app /tmp/src/app
COPY migrations /tmp/src/migrations
COPY scenarios /tmp/src/scenarios
COPY static /tmp/src/static
COPY templates /tmp/src/templates
RUN pip install --no-deps /tmp/src \
 && rm -rf /tmp/src \
 && useradd --create-home --uid 10001 batchscope \
 && mkdir -p data && chown batchscope data
USER batchscope

EXPOSE 8000
# /healthz answers 503 (urlopen raises) while the engine, the recorder or the database is
# not well; the reasons are in its body.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('BATCHSCOPE_PORT', '8000'), timeout=3)"
# Migrations are their own command, run before serving (never on import).
CMD ["sh", "-c", "batchscope db upgrade && exec batchscope serve --host 0.0.0.0"]

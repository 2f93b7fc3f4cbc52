"""A request's "Text" in its forensics panel (issue 31, item 5): a synthetic prompt of
random byte ids (not UTF-8) reads as byte escapes, never as U+FFFD; a text a tokenizer
already decoded with U+FFFD (another tokenizer, an older recording) shows its token ids.

Two recordings of the torch runner (the small random-weight model on CPU, byte tokenizer)
are written in-process into the served database.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.db.session import make_engine, make_sessionmaker
from app.live.hub import EventHub
from app.records.recorder import Recorder
from engine.engine import Engine
from engine.request import SamplingParams
from engine.runner.tokenizer import ByteTokenizer
from engine.runner.torch_runner import TorchRunner
from tests.app.records.helpers import HubPublisher
from tests.browser.harness import Console, Server, start_server, stop_process
from tests.runner.helpers import SMALL, engine_config

ESCAPED, REPLACED = "s-text-escaped", "s-text-replaced"
# Bytes that are no UTF-8 at all (a lone continuation byte, 0xff, a cut 3-byte lead).
BAD = bytes([0x80, 0xFF, 0x41, 0xE2, 0x82, 0x20])
PROMPT_JS = "() => document.querySelector('#life-text pre.life-text.prompt')?.textContent"


class ReplacingTokenizer(ByteTokenizer):
    """A tokenizer that decodes bytes it cannot read as U+FFFD (as many do)."""

    def decode(self, token_ids: list[int]) -> str:
        data = bytes(t - self.OFFSET for t in token_ids if self.OFFSET <= t < self.OFFSET + 256)
        return data.decode("utf-8", errors="replace")


def record(sessions: Any, sid: str, replacing: bool) -> list[int]:
    """Record one request with a synthetic prompt (BAD + random byte ids); its prompt ids."""
    hub = EventHub()
    recorder = Recorder(hub, sessions)
    config = engine_config()
    runner = TorchRunner(config, device="cpu", preset=SMALL)
    if replacing:
        runner.tokenizer = ReplacingTokenizer()
    hub.open_session(
        sid,
        {"name": sid, "source": "local", "runner": runner.name, "simulated": False,
         "config": config.as_dict(), "started_at": time.time()},
    )  # fmt: skip
    engine = Engine(config, runner, HubPublisher(hub, sid))
    rng = random.Random(7)
    prompt = [b + ByteTokenizer.OFFSET for b in BAD] + [rng.randint(3, 258) for _ in range(20)]
    assert engine.add_request("synthetic", prompt, SamplingParams(max_tokens=4)) is None
    while engine.has_unfinished_requests():
        engine.step()
    hub.close_session(sid)
    asyncio.run(recorder.flush())
    assert recorder.failures == 0, recorder.last_error
    return prompt


@pytest.fixture(scope="module")
def text_server(
    tmp_path_factory: pytest.TempPathFactory, migrated_db: Path
) -> Iterator[tuple[Server, list[int]]]:
    tmp = tmp_path_factory.mktemp("text")
    db_file = tmp / "recorded.sqlite"
    shutil.copyfile(migrated_db, db_file)
    engine = make_engine(f"sqlite:///{db_file}")
    prompts: list[list[int]] = []

    def write() -> None:  # in a thread: Playwright's event loop runs in this one
        sessions = make_sessionmaker(engine)
        prompts.append(record(sessions, ESCAPED, replacing=False))
        prompts.append(record(sessions, REPLACED, replacing=True))

    worker = threading.Thread(target=write)
    worker.start()
    worker.join()
    engine.dispose()
    assert len(prompts) == 2
    srv = start_server(tmp, migrated=db_file)
    try:
        yield srv, prompts[1]
    finally:
        stop_process(srv.proc)


def open_life(browser: Any, server: Server, console: Console, sid: str) -> tuple[Any, Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = console.watch(ctx.new_page(), server.url)
    page.goto(server.url + f"/?session={sid}&req=synthetic")
    page.wait_for_function(f"() => ({PROMPT_JS})() !== undefined")
    return ctx, page


def test_a_synthetic_prompt_reads_as_byte_escapes(
    browser: Any, text_server: tuple[Server, list[int]], console: Console
) -> None:
    server, _ = text_server
    ctx, page = open_life(browser, server, console, ESCAPED)
    try:
        texts = page.locator("#life-text pre.life-text").all_inner_texts()
        assert len(texts) == 2  # prompt and output
        assert all("\ufffd" not in t for t in texts), texts
        prompt = page.evaluate(PROMPT_JS)
        assert prompt.startswith("\\x80\\xffA\\xe2\\x82 ")
        # Control characters (random ids hold many) are escaped too: nothing invisible.
        assert [c for c in prompt if (ord(c) < 32 and c not in "\n\t") or ord(c) == 127] == []
        assert console.errors == []
    finally:
        ctx.close()


def test_a_text_decoded_with_replacement_characters_shows_its_ids(
    browser: Any, text_server: tuple[Server, list[int]], console: Console
) -> None:
    server, prompt = text_server
    life = server.api("GET", "/api/requests/synthetic", params={"session": REPLACED}).json()
    assert "\ufffd" in life["text"]["prompt_text"]  # what that tokenizer recorded
    ctx, page = open_life(browser, server, console, REPLACED)
    try:
        assert page.evaluate(PROMPT_JS) == " ".join(map(str, prompt))
        heads = page.locator("#life-text h4").all_inner_texts()
        assert heads[0] == f"prompt token ids ({len(prompt)}; the text is not valid UTF-8)"
        texts = page.locator("#life-text pre.life-text").all_inner_texts()
        assert all("\ufffd" not in t for t in texts), texts
        assert console.errors == []
    finally:
        ctx.close()

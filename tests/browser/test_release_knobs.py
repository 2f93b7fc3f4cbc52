"""The knobs of later vLLM releases in the live knobs form and the New session form, in a
real Chromium: shown and enabled only for a release that has them, and refused with the
release that added them when sent anyway."""

from __future__ import annotations

from typing import Any

from tests.browser.harness import Console, Server
from tests.browser.test_modes import open_engine_panel

LATER = (
    "max_num_active_seqs",
    "watermark",
    "prefill_schedule_interval",
    "long_prefill_token_threshold_adaptive",
)
SHOWN_JS = """([prefix, knobs]) => knobs.map(k => {
    const el = document.getElementById(prefix + '-' + k);
    return [k, !el.hidden && !el.disabled && el.offsetParent !== null];
})"""


def shown(page: Any, prefix: str) -> dict[str, bool]:
    return dict(page.evaluate(SHOWN_JS, [prefix, list(LATER)]))


def test_later_knobs_follow_the_release(page: Any, server: Server, console: Console) -> None:
    page.wait_for_function("() => batchscope.model.config.vllm_version === '0.34'")
    first = page.evaluate("() => batchscope.model.session")
    open_engine_panel(page, first)
    assert all(shown(page, "cfg").values()) and all(shown(page, "ns").values())
    # The live form changes one on 0.34 (the default release).
    page.fill("#cfg-max_num_active_seqs", "3")
    page.click("#btn-config")
    page.locator("#flash .flash-ok", has_text="max_num_active_seqs=3").wait_for()
    page.wait_for_function("() => batchscope.model.config.max_num_active_seqs === 3")
    # Choosing 0.20 in the New session form hides them there and says why.
    page.select_option("#ns-release", "0.20")
    assert not any(shown(page, "ns").values())
    note = page.locator("#new-session-form [data-later-note]")
    assert note.is_visible()
    assert "vLLM 0.20 has no max_num_active_seqs" in (note.text_content() or "")
    # A release in between: 0.27 has the watermark (0.24), not the 0.31 / 0.33 knobs.
    page.select_option("#ns-release", "0.27")
    assert shown(page, "ns") == {k: k == "watermark" for k in LATER}
    assert "vLLM 0.27 has no max_num_active_seqs" in (note.text_content() or "")
    page.select_option("#ns-release", "0.33")
    assert all(shown(page, "ns").values())
    assert "vLLM 0.33 has no cache_aware_admission_window" in (note.text_content() or "")
    page.select_option("#ns-release", "0.34")
    assert all(shown(page, "ns").values()) and not note.is_visible()
    page.select_option("#ns-release", "0.20")
    page.click("#btn-new-session")
    page.wait_for_function(
        f"() => batchscope.model.session && batchscope.model.session !== '{first}'"
    )
    page.wait_for_function("() => batchscope.model.config.vllm_version === '0.20'")
    assert server.api("GET", "/api/state").json()["config"]["max_num_active_seqs"] == 0
    # The live form follows the new session's release.
    page.wait_for_function(
        "() => document.getElementById('cfg-watermark').hidden"
        " && document.getElementById('cfg-watermark').disabled"
    )
    assert not any(shown(page, "cfg").values())
    assert page.locator("#config-form [data-later-note]").is_visible()
    # Sent anyway (the field forced back on): the engine's refusal is the flash.
    page.evaluate(
        "() => { const el = document.getElementById('cfg-watermark');"
        " el.hidden = false; el.disabled = false; }"
    )
    page.fill("#cfg-watermark", "0.1")
    page.click("#btn-config")
    error = page.locator("#flash .flash-error")
    error.wait_for()
    assert "vLLM 0.20 has no watermark (added in 0.24)" in (error.text_content() or "")
    assert [e for e in console.errors if "422" not in e] == []

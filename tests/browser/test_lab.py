"""The lab in the browser: a small sweep started from the /lab form runs in the
background, its runs appear in the chart and the table, one opens as a replayable session
(the Gantt), and two ticked runs open side by side in /compare."""

from __future__ import annotations

import re
from typing import Any

from tests.browser.harness import Console, Server

# The cells of the runs table under the headers named (one list per header).
COLUMNS_JS = """names => {
  const t = document.getElementById('lab-points-table');
  const heads = Array.from(t.tHead.rows[0].cells, th => th.textContent.trim());
  return names.map(n => Array.from(t.querySelectorAll('tbody tr[data-index]'),
    tr => tr.cells[heads.indexOf(n)].textContent.trim()));
}"""


def test_a_sweep_from_the_lab_page_opens_a_run_as_a_session(
    page: Any, server: Server, console: Console
) -> None:
    page.goto(server.url + "/lab")
    page.select_option("#lab-source", "library")
    page.select_option("select[name=scenario]", "long_prompt_vs_decodes")
    page.select_option("#lab-knob", "long_prefill_token_threshold")
    assert page.input_value("#lab-values") == "0,64,128,256,512"  # suggested values
    page.fill("#lab-values", "0,128")
    page.click("#lab-run")
    page.wait_for_url("**/lab/sweeps/lab-*")
    page.wait_for_function("() => document.body.dataset.drawn === 'final'", timeout=60_000)
    sweep = page.get_attribute("#lab-sweep", "data-sweep")
    data = server.api("GET", f"/api/lab/sweeps/{sweep}").json()
    assert data["status"] == "done" and len(data["points"]) == 2
    assert page.get_attribute("#lab-chart", "data-runs") == "2"
    page.locator("#lab-points-table tbody tr[data-index]").nth(1).wait_for()  # htmx swaps it
    assert page.locator("#lab-points-table tbody tr[data-index]").count() == 2
    # Counts are whole numbers ("3", not "3.00"); real-valued figures keep two decimals.
    preemptions, ttft = page.evaluate(COLUMNS_JS, ["preemptions", "ttft_p50_ms"])
    assert preemptions == [str(int(p["metrics"]["preemptions"])) for p in data["points"]]
    assert all(re.fullmatch(r"\d+\.\d\d", t) for t in ttft), ttft
    assert page.locator("#lab-chart .scatterlayer .point").count() >= 2
    page.select_option("#chart-metric", "preemptions")  # any figure redraws
    page.wait_for_function("() => document.querySelector('#lab-chart .ytitle')"
                           ".textContent.startsWith('preemptions')")  # fmt: skip

    # Tick both runs: they open side by side in /compare.
    page.check('#lab-points-table tr[data-index="0"] input.pick')
    page.check('#lab-points-table tr[data-index="1"] input.pick')
    page.click("#btn-compare-points")
    page.wait_for_url("**/compare?a=*&b=*")
    page.wait_for_function("() => document.body.dataset.drawn === 'yes'")
    differs = page.locator("#config-table tr.differs").evaluate_all(
        "rows => rows.map(r => r.dataset.knob)"
    )
    assert differs == ["long_prefill_token_threshold"]

    # One run opens as a recorded session: the replay with its Gantt.
    page.goto(server.url + f"/lab/sweeps/{sweep}")
    page.wait_for_function("() => document.body.dataset.drawn === 'final'")
    page.click('#lab-points-table tr[data-index="1"] button.open-point')
    page.wait_for_url("**/?session=s-*")
    steps = int(data["points"][1]["metrics"]["steps"])
    page.wait_for_function(
        f"() => batchscope.conn.snapshots > 0 && batchscope.model.step === {steps - 1}"
    )
    assert page.locator("#conn-state").inner_text() == "replay"
    page.wait_for_function(  # the canvas timeline drew every request of the run
        "() => { const g = document.getElementById('gantt');"
        " return +g.dataset.drawn > 0"
        " && g.dataset.drawn === String(batchscope.model.order.length); }"
    )
    assert console.errors == []
    assert console.foreign == []

"""`--database-url sqlite://` (the test servers' database): a private database that several
threads write at once without tripping over each other, and that is gone when the server
stops. It used to be one in-memory connection shared by every thread, where the recorder's
savepoints, the lab's writes and a web request's read interleaved ("no such savepoint",
"cannot rollback - no transaction is active": a 500 now and then)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from app.db.private import ServingDatabase
from app.records.recorder import Recorder
from tests.conftest import start_server

SWEEP = {
    "source": "workload",
    "workload": "poisson:rate=50,n=20,prompt=48,output=12",
    "seed": 3,
    "knob": "max_num_batched_tokens",
    "values": "64,128,256",
    "knob2": "max_num_seqs",
    "values2": "4,16",
}


def test_a_private_database_is_a_migrated_file_removed_at_the_end() -> None:
    database = ServingDatabase("sqlite://")
    assert database.private and database.url.startswith("sqlite:///")
    file = Path(database.url.removeprefix("sqlite:///"))
    database.prepare()
    assert file.is_file() and file.stat().st_size > 0
    database.remove()
    assert not file.parent.exists()
    other = ServingDatabase("sqlite:///somewhere/else.db")
    assert not other.private and other.url == "sqlite:///somewhere/else.db"


def test_the_recorder_the_lab_and_web_writes_share_it_without_errors() -> None:
    live, server, thread = start_server(max_num_seqs=4)
    statuses: list[int] = []
    stop = threading.Event()
    try:
        with live.client() as c:
            c.post("/api/requests", json={"prompt_len": 40, "max_tokens": 400, "count": 8})
            session = c.get("/api/state").json()["session"]
            sweep = c.post("/api/lab/sweeps", json=SWEEP, timeout=60)
            assert sweep.status_code == 201, sweep.text
            sweep_id = sweep.json()["sweep"]

            def hammer(n: int) -> None:  # reads and writes from the web's threadpool
                with live.client() as h:
                    i = 0
                    while not stop.is_set():
                        i += 1
                        for r in (
                            h.patch(f"/api/sessions/{session}", json={"name": f"w{n}-{i}"}),
                            h.get(f"/api/lab/sweeps/{sweep_id}"),
                            h.get("/api/sessions"),
                        ):
                            statuses.append(r.status_code)

            workers = [threading.Thread(target=hammer, args=(n,)) for n in range(3)]
            for w in workers:
                w.start()
            deadline = time.monotonic() + 240
            status = ""
            while time.monotonic() < deadline:
                status = c.get(f"/api/lab/sweeps/{sweep_id}").json()["status"]
                if status not in ("queued", "running"):
                    break
                time.sleep(0.3)
            stop.set()
            for w in workers:
                w.join(60)
            assert status == "done", status
            errors = [s for s in statuses if s >= 500]
            assert len(statuses) > 30 and not errors, (len(statuses), errors[:5])
            recorder: Recorder = live.app.state.recorder
            assert recorder.failures == 0 and recorder.num_rejected == 0, recorder.last_error
            url = str(live.app.state.db.kw["bind"].url)
    finally:
        stop.set()
        server.should_exit = True
        thread.join(30)
    folder = Path(url.removeprefix("sqlite:///")).parent
    assert folder.name.startswith("batchscope-private-") and not folder.exists()

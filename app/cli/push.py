"""`batchscope engine --push`: the engine headless in this process, pushing its frames to a
dashboard's /ws/ingest (app/nodes/producer.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from app.cli.common import (
    CliError,
    add_loop_flags,
    check_trace_workload,
    loop_overrides,
    run_until_signalled,
    runner_from_settings,
)
from app.cli.help import from_env


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    eng = sub.add_parser("engine", help="run the engine headless and push frames to a dashboard")
    eng.add_argument(
        "--push",
        metavar="WS_URL",
        help="the dashboard's ingest socket, e.g. ws://127.0.0.1:8000/ws/ingest (required "
        "unless --link-fd)",
    )
    eng.add_argument("--token", help="the dashboard's control token (with --push)")
    eng.add_argument(
        "--link-fd",
        type=int,
        metavar="FD",
        help="internal: the socket `batchscope serve` gave its own engine process (the "
        "engine's settings then come from BATCHSCOPE_* variables)",
    )
    eng.add_argument(
        "--rerun",
        action="store_true",
        help="internal: run one re-run job (JSON on stdin), its frames to stdout",
    )
    node = eng.add_argument("--node", default=None, help="node name shown in the dashboard")
    node.shown_default = "this host's name"  # type: ignore[attr-defined]
    from_env(eng.add_argument("--runner", choices=("sim", "torch")), "runner")
    from_env(eng.add_argument("--model", metavar="DIR"), "model", "built-in random weights")
    from_env(eng.add_argument("--device", choices=("auto", "cpu", "cuda")), "device")
    from_env(eng.add_argument("--workload", metavar="poisson|none|trace:FILE"), "workload")
    from_env(
        eng.add_argument(
            "--trace-block-tokens", type=int, metavar="N", help="trace:FILE: tokens per hash id"
        ),
        "trace_block_tokens",
    )
    add_loop_flags(eng)
    eng.add_argument(
        "--buffer",
        type=int,
        default=20_000,
        help="frames kept for resending while the dashboard is away",
    )
    eng.set_defaults(run=cmd_engine)


def cmd_engine(args: argparse.Namespace) -> int:
    import logging
    import socket

    from pydantic import ValidationError

    from app.nodes.producer import Producer, QueueSink
    from app.nodes.scenarios import ScenarioArrivals
    from app.protocol.session import engine_fields
    from app.settings import Settings
    from engine.engine import Engine
    from engine.engine_core import EngineCore
    from engine.workload import PoissonWorkload

    if args.rerun:
        import sys

        from app.records.rerun_process import run_job

        run_job(sys.stdin, sys.stdout)
        return 0
    if args.link_fd is not None:
        from app.cli.engine_link import run_linked_engine

        return run_linked_engine(args.link_fd)
    if args.push is None or args.token is None:
        raise CliError("--push WS_URL and --token are required (or --link-fd, used by serve)")
    if not args.push.startswith(("ws://", "wss://")):
        raise CliError("--push: must be a ws:// or wss:// URL of a dashboard's /ws/ingest")
    if args.buffer < 100:
        raise CliError("--buffer: must be >= 100 frames")
    overrides = {
        k: getattr(args, k)
        for k in ("runner", "model", "device", "workload", "trace_block_tokens")
        if getattr(args, k) is not None
    }
    overrides.update(loop_overrides(args))
    try:
        settings = Settings(**overrides)
        config = settings.engine_config()
    except (ValidationError, ValueError) as exc:
        raise CliError(str(exc)) from None
    trace = check_trace_workload(settings)
    runner = runner_from_settings(settings, config)
    node = args.node or socket.gethostname()
    sink = QueueSink()
    engine = Engine(config, runner, sink)
    counter = iter(range(1, 1 << 62))
    workload: Callable[[Engine], None] = (
        ScenarioArrivals(trace)
        if trace is not None
        else PoissonWorkload(settings.workload_spec(), next_id=lambda: f"{node}-p{next(counter)}")
    )
    core = EngineCore(
        engine, realtime=settings.realtime, speed=settings.sim_speed, before_step=workload
    )
    announce = {"name": f"{node} ({runner.name})", **engine_fields(runner, config.as_dict())}
    producer = Producer(
        engine, sink, args.push, args.token, node, announce, buffer_frames=args.buffer, core=core
    )

    logging.basicConfig(level=logging.INFO, format="batchscope engine: %(message)s")

    run_until_signalled(producer.run)
    return 0

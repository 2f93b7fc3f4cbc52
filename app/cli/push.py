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
    from_env(
        eng.add_argument(
            "--bus",
            metavar="NATS_URL",
            help="publish to a NATS JetStream fleet bus instead of --push, e.g. "
            "nats://127.0.0.1:4222 (app/bus/node.py)",
        ),
        "bus",
        shown_default="none",
    )
    eng.add_argument(
        "--detail",
        choices=("on-demand", "always"),
        default="on-demand",
        help="with --bus: full frames only while a dashboard watches (summaries always), or always",
    )
    eng.add_argument(
        "--flight-s",
        type=float,
        default=300.0,
        help="with --bus: seconds of full frames the flight recorder keeps",
    )
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
    from_env(eng.add_argument("--workload", metavar="demo|poisson|none|trace:FILE"), "workload")
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
        help="frames kept for resending while the dashboard is away (with --bus: the "
        "flight recorder's size)",
    )
    eng.set_defaults(run=cmd_engine)


def cmd_engine(args: argparse.Namespace) -> int:
    import logging
    import socket

    from pydantic import ValidationError

    from app.nodes.producer import Producer, QueueSink, TokenRefused
    from app.settings import Settings
    from engine.demo_workload import DemoWorkload
    from engine.engine import Engine
    from engine.engine_core import EngineCore
    from engine.workload import PoissonWorkload
    from protocol.session import engine_fields

    if args.rerun:
        import sys

        from app.records.rerun_process import run_job

        run_job(sys.stdin, sys.stdout)
        return 0
    if args.link_fd is not None:
        from app.cli.engine_link import run_linked_engine

        return run_linked_engine(args.link_fd)
    bus = args.bus if args.push is None else None
    if bus is None and (args.push is None or args.token is None):
        raise CliError("--push WS_URL and --token are required (or --bus NATS_URL, or --link-fd)")
    if bus is not None and not bus.startswith("nats://"):
        raise CliError("--bus: must be a nats://HOST:PORT URL")
    if bus is not None and not 1 <= args.flight_s <= 86_400:
        raise CliError("--flight-s: must be 1-86400 seconds")
    if bus is None and not args.push.startswith(("ws://", "wss://")):
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
    workload: Callable[[Engine], None]
    if trace is not None:
        workload = trace.arrivals()
    elif settings.workload == "demo":
        workload = DemoWorkload(next_id=lambda: f"{node}-d{next(counter)}")
    else:
        workload = PoissonWorkload(
            settings.workload_spec(), next_id=lambda: f"{node}-p{next(counter)}"
        )
    core = EngineCore(
        engine, realtime=settings.realtime, speed=settings.sim_speed, before_step=workload
    )
    announce = {"name": f"{node} ({runner.name})", **engine_fields(runner, config.as_dict())}
    logging.basicConfig(level=logging.INFO, format="batchscope engine: %(message)s")
    if bus is not None:
        from app.bus.node import BusNode

        bus_node = BusNode(
            engine,
            sink,
            bus,
            node,
            announce,
            core,
            detail=args.detail,
            flight_frames=args.buffer,
            flight_s=args.flight_s,
            max_age_s=settings.bus_max_age_s,
            max_bytes=int(settings.bus_max_mb * 1e6),
        )
        try:
            run_until_signalled(bus_node.run)
        except ConnectionError as exc:  # no bus at that URL (app.bus.subjects.connect)
            raise CliError(f"--bus: {exc}") from None
        return 0
    producer = Producer(
        engine, sink, args.push, args.token, node, announce, buffer_frames=args.buffer, core=core
    )
    try:
        run_until_signalled(producer.run)
    except TokenRefused as exc:
        raise CliError(f"--token: {exc}") from None
    return 0

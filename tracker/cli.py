"""The ``plateau`` command."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracker.config import Settings

# Commands that need the tracker's dependencies (the `server` extra); `sync` needs the SDK alone.
_SLIM_COMMANDS = frozenset({"sync"})


def _settings(args: argparse.Namespace) -> Settings:
    from tracker.config import Settings

    overrides = {
        name: getattr(args, name)
        for name in ("home", "database_url", "host", "port")
        if getattr(args, name, None) is not None
    }
    return Settings(**overrides)


def _add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--home", type=Path, help="data folder (PLATEAU_HOME, default ~/.plateau)")
    parser.add_argument(
        "--database-url", help="SQLAlchemy URL (PLATEAU_DATABASE_URL, default SQLite in --home)"
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    from tracker.db.engine import Database
    from tracker.db.prepare import prepare_schema
    from tracker.serve import serve
    from tracker.services.auth import any_tokens, is_loopback

    settings = _settings(args)
    if not is_loopback(settings.host) and not args.insecure:
        prepare_schema(settings.resolved_database_url())
        database = Database(settings.resolved_database_url())
        try:
            protected = any_tokens(database)
        finally:
            database.dispose()
        if not protected:
            print(
                f"plateau serve: refusing to listen on {settings.host} with no API token configured "
                "(anyone who can reach it could read and write every run). Create one with "
                "`plateau token create --project P --scope write`, or pass --insecure.",
                file=sys.stderr,
            )
            return 1
    if settings.is_sqlite() and args.workers > 1:
        print(
            "plateau serve: SQLite has one writer at a time; several workers only queue on its lock "
            "(use PostgreSQL with PLATEAU_DATABASE_URL to scale out)",
            file=sys.stderr,
        )
    from tracker.serve import PortUnavailableError

    def announce(url: str) -> None:
        print(
            f"plateau tracker on {url} "
            f"(database {settings.resolved_database_url()}, {args.workers} worker(s))",
            flush=True,
        )

    try:
        serve(settings, workers=args.workers, log_level=args.log_level, on_listening=announce)
    except PortUnavailableError as exc:
        print(
            f"plateau serve: {exc.strerror}; is a tracker already running there? "
            "Choose another with --port (or PLATEAU_PORT)",
            file=sys.stderr,
        )
        return 1
    return 0


def _cmd_token(args: argparse.Namespace) -> int:
    from tracker.db.engine import Database
    from tracker.db.prepare import prepare_schema
    from tracker.errors import NotFoundError
    from tracker.services import auth

    url = _settings(args).resolved_database_url()
    prepare_schema(url)
    database = Database(url)
    try:
        if args.token_command == "create":
            token_id, token = auth.create_token(database, args.project, args.scope, args.name or "")
            print(f"token {token_id} ({args.scope}, project {args.project!r}); shown once, keep it secret:")
            print(token)
        elif args.token_command == "list":
            for row in auth.list_tokens(database, args.project):
                state = "revoked" if row["revoked"] else "active"
                fields = [
                    f"{row['id']:>5}",
                    str(row["project"]),
                    f"{row['scope']:5}",
                    f"{row['prefix']}...",
                    state,
                ]
                print("  ".join([*fields, str(row["name"])]))
        else:
            try:
                auth.revoke_token(database, args.id)
            except NotFoundError as exc:
                print(f"plateau token revoke: {exc}", file=sys.stderr)
                return 1
            print(f"token {args.id} revoked")
    finally:
        database.dispose()
    return 0


def _cmd_db(args: argparse.Namespace) -> int:
    from tracker.db import migrate
    from tracker.db.engine import make_engine

    url = _settings(args).resolved_database_url()
    if args.db_command == "upgrade":
        migrate.upgrade(url, args.revision)
    elif args.db_command == "downgrade":
        migrate.downgrade(url, args.revision)
    engine = make_engine(url)
    try:
        print(f"database at revision {migrate.current_revision(engine)} (head {migrate.head_revision(url)})")
    finally:
        engine.dispose()
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from tracker.demo import run_demo

    return run_demo(_settings(args), url=args.url, epochs=args.epochs, seed=args.seed)


def _cmd_replay(args: argparse.Namespace) -> int:
    from tracker.replay.command import run_replay

    return run_replay(args)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    import importlib.util

    from tracker.discovery import port_is_free, tracker_for, wait_for_http
    from tracker.processes import start_child, stop_child

    if importlib.util.find_spec("streamlit") is None:
        print(
            "plateau dashboard needs the dashboard extra: pip install 'plateau-tracker[dashboard]'",
            file=sys.stderr,
        )
        return 1
    settings = _settings(args)
    import dashboard  # the package, wherever it is installed (a wheel, or a checkout installed with -e)

    app = Path(dashboard.__file__).parent / "app.py"
    with tracker_for(settings, args.url) as url:
        command = [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(app),
            "--server.port",
            str(args.dashboard_port),
            "--server.address",
            args.dashboard_host,
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ]
        if not port_is_free(args.dashboard_host, args.dashboard_port):
            print(
                f"plateau dashboard: {args.dashboard_host}:{args.dashboard_port} is in use; is a dashboard "
                "already running there? Choose another with --dashboard-port",
                file=sys.stderr,
            )
            return 1
        streamlit = start_child(command, env={**os.environ, "PLATEAU_URL": url})
        address = f"http://{args.dashboard_host}:{args.dashboard_port}"
        try:
            if wait_for_http(f"{address}/_stcore/health", streamlit, timeout=60.0):
                print(f"plateau dashboard on {address} (tracker {url})", flush=True)
            return streamlit.wait()
        except KeyboardInterrupt:
            return 0
        finally:
            stop_child(streamlit)


def _rehoming(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """``--policy KEY=SPEC`` and ``--experiment KEY=NAME`` as replacements of spooled create-body fields."""
    from sdk._spool import spooled_runs

    spooled = spooled_runs(Path(args.spool) if args.spool else None)
    changes: dict[str, dict[str, Any]] = {}
    for option, pairs in (("--policy", args.policy or []), ("--experiment", args.experiment or [])):
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key or not value:
                raise ValueError(f"{option} takes RUN_KEY=VALUE, got {pair!r}")
            if key not in spooled:
                raise ValueError(f"no run {key!r} in the spool (spooled: {', '.join(spooled) or 'none'})")
            if option == "--experiment":
                changes.setdefault(key, {})["experiment"] = value
                continue
            try:
                from tracker.replay.command import load_policy
            except ImportError as exc:
                raise ValueError(
                    f"--policy reads presets and policy files with the tracker's code ({exc.name} is "
                    "missing): pip install 'plateau-tracker[server]'"
                ) from None
            create = json.loads((spooled[key] / "run.json").read_text())["create"]
            old = create.get("policy") or {}
            policy = load_policy(value, monitor=old.get("monitor", "val/loss"), mode=old.get("mode", "min"))
            kept = {name: old[name] for name in ("combine", "reduce") if name in old}
            changes.setdefault(key, {})["policy"] = {**policy.model_dump(mode="json"), **kept}
    return changes


def _cmd_sync(args: argparse.Namespace) -> int:
    import sdk

    try:
        rehome = _rehoming(args)
        report = sdk.sync(
            Path(args.spool) if args.spool else None, url=args.url, drop=set(args.drop or []), rehome=rehome
        )
    except ValueError as exc:
        print(f"plateau sync: {exc}", file=sys.stderr)
        return 1
    dropped = f"; {report.dropped} runs dropped unsent" if report.dropped else ""
    print(
        f"plateau sync: {report.points} points in {report.batches} batches of {report.runs} runs sent "
        f"({report.finished} runs ended as their trainer finished them); {report.rejected} points "
        f"rejected; {report.left} batches left in the spool{dropped}"
    )
    for error in report.errors[:20]:
        print(f"  {error}", file=sys.stderr)
    if len(report.errors) > 20:
        print(f"  ... and {len(report.errors) - 20} more", file=sys.stderr)
    return 0 if report.left == 0 else 1


def _tracker_url(args: argparse.Namespace) -> contextlib.AbstractContextManager[str]:
    """The tracker at --url or $PLATEAU_URL, else the configured one, started on the embedded default
    if none runs."""
    from tracker.discovery import tracker_for

    return tracker_for(_settings(args), args.url or os.environ.get("PLATEAU_URL"))


def _needs_tensorboard(command: str) -> bool:
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        print(
            f"plateau {command} tensorboard needs the tensorboard package: "
            "pip install 'plateau-tracker[tensorboard]'",
            file=sys.stderr,
        )
        return True
    return False


def _cmd_export(args: argparse.Namespace) -> int:
    if _needs_tensorboard("export"):
        return 1
    from tracker.tb import export_runs

    token = args.token or os.environ.get("PLATEAU_TOKEN")
    with _tracker_url(args) as url:
        report = export_runs(
            url,
            Path(args.logdir),
            run_ids=args.run,
            experiment=args.experiment,
            project=args.project,
            token=token,
        )
    for run in report.runs:
        print(
            f"run {run.run_id}: {run.points} points in {run.series} series, {run.decisions} decisions "
            f"-> {run.directory}"
        )
    if not report.runs:
        where = f" of project {args.project!r}" if args.project else ""
        print(f"plateau export: experiment {args.experiment!r}{where} has no runs", file=sys.stderr)
        return 1
    print(
        f"plateau export: {len(report.runs)} runs, {report.points} points; tensorboard --logdir {args.logdir}"
    )
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    if _needs_tensorboard("import"):
        return 1
    from tracker.tb import import_logdir

    logdir = Path(args.logdir)
    if not logdir.is_dir():
        print(f"plateau import: {logdir} is not a folder", file=sys.stderr)
        return 1
    token = args.token or os.environ.get("PLATEAU_TOKEN")
    with _tracker_url(args) as url:
        report = import_logdir(logdir, url, experiment=args.experiment, project=args.project, token=token)
    for run in report.runs:
        print(
            f"{run.directory} -> run {run.run_id} ({run.name}): {run.points} points in {run.series} series, "
            f"{run.accepted} new; {run.skipped_values} non-scalar values skipped"
        )
    print(f"plateau import: {len(report.runs)} runs, {report.points} points")
    return 0 if report.runs else 1


def build_parser() -> argparse.ArgumentParser:
    from tracker import __version__

    parser = argparse.ArgumentParser(prog="plateau", description="Plateau: know when training has converged.")
    parser.add_argument("--version", action="version", version=f"plateau {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the tracker server")
    _add_store_options(serve)
    serve.add_argument("--host", help="address to bind (PLATEAU_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (PLATEAU_PORT, default 8765)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="uvicorn's log level (default warning: errors and warnings only)",
    )
    serve.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback address with no API token configured"
    )
    serve.set_defaults(handler=_cmd_serve)

    db = commands.add_parser(
        "db",
        help="database schema migrations",
        description="Alembic migrations of the tracker's database "
        "(the tracker applies them itself on start).",
    )
    db_commands = db.add_subparsers(dest="db_command", required=True)
    db_help = {
        "upgrade": "migrate to a revision (default head, the newest)",
        "downgrade": "migrate back to a revision",
        "current": "print the database's revision and the newest one",
    }
    for name, default in (("upgrade", "head"), ("downgrade", None), ("current", None)):
        sub = db_commands.add_parser(name, help=db_help[name], description=db_help[name])
        _add_store_options(sub)
        if name != "current":
            sub.add_argument(
                "revision",
                nargs=None if default is None else "?",
                default=default,
                help="an Alembic revision id, or head / base / -1",
            )
    db.set_defaults(handler=_cmd_db)

    token = commands.add_parser(
        "token",
        help="per-project API tokens",
        description="API tokens, each for one project with scope read or write. A tracker that has any "
        "token requires one on every request (Authorization: Bearer ...); the SDK and commands take "
        "$PLATEAU_TOKEN.",
    )
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser(
        "create", help="create a token (printed once)", description="Create a token; it is printed once."
    )
    create.add_argument("--project", required=True, help="the project the token opens")
    create.add_argument(
        "--scope", choices=["read", "write"], required=True, help="read: see runs; write: also log and create"
    )
    create.add_argument("--name", help="a label to tell tokens apart in `plateau token list`")
    listing = token_commands.add_parser(
        "list", help="list tokens (never their secret)", description="List tokens, never their secret."
    )
    listing.add_argument("--project", help="only this project's tokens")
    revoke = token_commands.add_parser(
        "revoke", help="revoke a token", description="Revoke a token: it is refused from now on."
    )
    revoke.add_argument("id", type=int, help="the token's id, as `plateau token list` shows it")
    for sub in (create, listing, revoke):
        _add_store_options(sub)
    token.set_defaults(handler=_cmd_token)

    demo = commands.add_parser(
        "demo",
        help="train small models on digits, stopped by Plateau",
        description="Train four small PyTorch models on scikit-learn's digits under Plateau's default "
        "decisions (checkpoint at each new best, stop), then print what was decided. Starts a tracker on "
        "the configured store unless one runs there.",
    )
    _add_store_options(demo)
    demo.add_argument("--url", help="use this running tracker instead of starting one")
    demo.add_argument("--port", type=int, help="port for the tracker the demo starts")
    demo.add_argument("--epochs", type=int, default=60, help="epoch budget of each run")
    demo.add_argument("--seed", type=int, default=0, help="seed of the data split and the models")
    demo.set_defaults(handler=_cmd_demo)

    dashboard = commands.add_parser(
        "dashboard",
        help="the Streamlit dashboard (starts a tracker if none runs)",
        description="The Streamlit dashboard: runs with their decisions, curves, comparison, distributed "
        "health, complexity. Starts a tracker on the configured store unless one runs there; Ctrl-C, "
        "SIGTERM or SIGHUP stop both.",
    )
    _add_store_options(dashboard)
    dashboard.add_argument(
        "--url", help="a running tracker to show (default: the configured one, started if away)"
    )
    dashboard.add_argument(
        "--port", type=int, help="port of the tracker (PLATEAU_PORT, default 8765); started there if away"
    )
    dashboard.add_argument(
        "--dashboard-host", default="127.0.0.1", help="address the dashboard listens on (default 127.0.0.1)"
    )
    dashboard.add_argument(
        "--dashboard-port", type=int, default=8501, help="port the dashboard listens on (default 8501)"
    )
    dashboard.set_defaults(handler=_cmd_dashboard)

    replay = commands.add_parser("replay", help="apply a stopping policy to recorded curves")
    replay.add_argument(
        "policy", help="a JSON or YAML policy file, or a preset: default, default-sweep, median, patience-K"
    )
    replay.add_argument("--curves", nargs="*", help="JSON-lines curve files (OPDA schema)")
    replay.add_argument("--url", help="tracker for --experiment (PLATEAU_URL, default http://127.0.0.1:8765)")
    replay.add_argument("--token", help="API token for --experiment (PLATEAU_TOKEN)")
    replay.add_argument("--experiment", help="replay this experiment's stored runs from the tracker")
    replay.add_argument("--project", help="project of --experiment")
    replay.add_argument("--metric", default="val", help="the metric the policy watches")
    replay.add_argument("--score", help="the metric regret is scored on (default: --metric)")
    replay.add_argument(
        "--mode",
        choices=["min", "max"],
        help="the direction the metric improves in: min for a loss, max for an accuracy (default: the curve "
        'file\'s own "mode", else max)',
    )
    replay.add_argument("--sweep", action="store_true", help="replay each source as a sweep in arrival order")
    replay.add_argument("--source", action="append", help="only these sources")
    replay.add_argument(
        "--include-incomplete",
        action="store_true",
        help="also score runs whose curve stops before its budget (diverged)",
    )
    replay.add_argument(
        "--json", action="store_true", help="print the per-source figures and every stop as JSON"
    )
    replay.set_defaults(handler=_cmd_replay)

    export = commands.add_parser("export", help="export stored runs to another tool's format")
    export_formats = export.add_subparsers(dest="export_format", required=True)
    tb_export = export_formats.add_parser(
        "tensorboard", help="event files, one folder per run: scalars, decisions as text, HParams"
    )
    chosen = tb_export.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--run", type=int, action="append", help="a run id (repeat for several)")
    chosen.add_argument("--experiment", help="every run of this experiment")
    tb_export.add_argument("--project", help="project of --experiment")
    tb_export.add_argument("--logdir", required=True, help="TensorBoard log folder to write into")
    importing = commands.add_parser("import", help="import runs from another tool's files")
    import_formats = importing.add_subparsers(dest="import_format", required=True)
    tb_import = import_formats.add_parser(
        "tensorboard", help="scalar series of event files, one run per event-file folder"
    )
    tb_import.add_argument("logdir", help="a TensorBoard log folder")
    tb_import.add_argument("--experiment", required=True, help="experiment to import the runs into")
    tb_import.add_argument("--project", default="default", help="project of --experiment (default: default)")
    for sub in (tb_export, tb_import):
        _add_store_options(sub)
        sub.add_argument(
            "--url", help="tracker URL (PLATEAU_URL; default: the configured one, started if away)"
        )
        sub.add_argument("--token", help="API token (PLATEAU_TOKEN)")
    tb_export.set_defaults(handler=_cmd_export)
    tb_import.set_defaults(handler=_cmd_import)

    sync = commands.add_parser(
        "sync",
        help="send the SDK's spooled points to the tracker",
        description="Send what the SDK spooled while the tracker was away: each run is created or joined "
        "by its run key, its points sent in order, then its summary and its finish (status and time). A "
        "run the tracker refuses stays in the spool until corrected (--policy, --experiment) or dropped.",
    )
    sync.add_argument("--spool", help="spool folder (default $PLATEAU_HOME/spool)")
    sync.add_argument("--url", help="tracker URL (default: the one each run was logging to)")
    sync.add_argument(
        "--drop", action="append", metavar="RUN_KEY", help="delete this run's spool unsent (repeatable)"
    )
    sync.add_argument(
        "--policy",
        action="append",
        metavar="RUN_KEY=POLICY",
        help="send this run with another policy: a preset (default, patience-K, ...) or a JSON/YAML file; "
        "its monitor and mode are kept",
    )
    sync.add_argument(
        "--experiment", action="append", metavar="RUN_KEY=NAME", help="send this run into another experiment"
    )
    sync.set_defaults(handler=_cmd_sync)
    return parser


def _one_line(exc: BaseException) -> str:
    """What went wrong with the tracker, in one line a user can act on."""
    from sdk.client import TrackerError

    if isinstance(exc, TrackerError):
        if exc.status is None:
            return f"cannot reach the tracker at {exc.url} ({exc})"
        return f"the tracker at {exc.url} answered {exc}"
    return str(exc)


def _missing_server(command: str) -> str | None:
    """One line saying which extra to install, when ``command`` needs what a slim install lacks."""
    if command in _SLIM_COMMANDS:
        return None
    try:
        import httpx  # noqa: F401 - only whether it imports

        import tracker.config
        import tracker.db.engine  # noqa: F401
    except ImportError as exc:
        return (
            f"plateau {command} needs the tracker's dependencies ({exc.name} is missing): "
            "pip install 'plateau-tracker[server]'"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``plateau`` command; returns its exit code. Errors of the network, of the tracker and of
    the user's input are one line on stderr and exit code 1, never a traceback."""
    from tracker.processes import exit_on_signals

    args = build_parser().parse_args(argv)
    missing = _missing_server(args.command)
    if missing is not None:
        print(missing, file=sys.stderr)
        return 1
    from sdk.client import TrackerError

    remote_errors: tuple[type[Exception], ...] = (TrackerError,)
    try:
        from tracker.discovery import TrackerUnavailableError

        remote_errors += (TrackerUnavailableError,)
    except ImportError:  # a slim install runs `sync` alone, which needs no tracker code
        pass
    try:
        with exit_on_signals():  # SIGTERM/SIGHUP unwind like Ctrl-C: the children a command started stop
            result: int = args.handler(args)
            return result
    except KeyboardInterrupt:
        return 130
    except remote_errors as exc:
        print(f"plateau {args.command}: {_one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""``ctxpress users``: the developers of a team appliance, their repository grants and credentials files.

Users and grants live in PostgreSQL. Adding or removing a user rewrites the NATS authorization block and reloads
the embedded nats-server (no restart; a removed user's connections are closed). Grants are not NATS permissions:
the workers read them with a 2-second cache, so a grant or revoke takes effect within that.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ctxpress_core.settings import Settings


def _fail(message: str, code: int = 1) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _repositories(value: str) -> list[str]:
    from ctxpress.members import repositories

    try:
        return repositories(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _emit(text: str, out: Path | None, what: str) -> None:
    """A credentials file: to ``out`` (owner-only) or to stdout, for the admin to hand over."""
    from ctxpress_core.identity import write_private_file

    if out is None:
        sys.stdout.write(text)
    else:
        write_private_file(out, text)
        print(f"wrote {what} to {out} (mode 0600)", file=sys.stderr)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _cmd_users(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress import members
    from ctxpress_core import identity
    from db import team as store
    from db.console import AdminExists
    from db.migrations import migrate

    url = settings.effective_database_url()
    actor = members.Actor.shell()
    if not identity.team_mode(settings) and args.action in ("add", "remove", "sync"):
        print("note: team mode is off (set CTXPRESS_TEAM=true and restart with `ctxpress up`): until then the "
              "appliance serves whoever reaches it on loopback, and these users are not asked to log in",
              file=sys.stderr)
    try:
        migrate(url)  # the tables exist even before the first `ctxpress up` against this database
        if args.action in ("add", "hooks"):
            kind = identity.USER_KIND_HOOKS if args.action == "hooks" else identity.USER_KIND_DEVELOPER
            text = members.add(settings, actor, args.name, args.repos, kind, args.url, _stderr)
            _emit(text, args.out, f"the credentials of {args.name}")
            reader = ("`ctxpress hooks install` reads the file through CTXPRESS_NATS_CREDENTIALS; its hooks index "
                      "only these repositories" if kind == identity.USER_KIND_HOOKS
                      else "the editor reads the file through CTXPRESS_NATS_CREDENTIALS")
            print(f"added {kind} user {args.name} with {', '.join(args.repos)}; {reader} (the password is not stored "
                  "anywhere else)", file=sys.stderr)
        elif args.action == "rotate":
            text = members.rotate(settings, actor, args.name, args.url, _stderr, args.out)
            _emit(text, args.out, f"the credentials of {args.name}")
            print(f"new password for {args.name}: the old one no longer logs in; hand over the new file",
                  file=sys.stderr)
        elif args.action == "grant":
            members.grant(settings, actor, args.name, args.repos)
            print(f"{args.name} may now use {', '.join(args.repos)}")
        elif args.action == "revoke":
            removed = members.revoke(settings, actor, args.name, args.repos)
            print(f"revoked {removed} grant(s) of {args.name}; the workers stop serving them within 2 s")
        elif args.action == "remove":
            saved = members.remove(settings, actor, args.name, _stderr)
            print(f"removed {args.name}, their grants and their {saved} saved file(s); their connections are closed")
        elif args.action == "list":
            rows = store.list_users(url)
            if args.json:
                print(json.dumps([{"name": r.name, "kind": r.kind, "created_at": r.created_at.isoformat(),
                                   "repositories": r.repositories} for r in rows], indent=2))
            else:
                for r in rows:
                    print(f"  {r.name:<20} {r.kind:<10} {', '.join(r.repositories) or '(no repositories)'}")
                print(f"{len(rows)} user(s); service credentials in {identity.team_dir(settings)}", file=sys.stderr)
        elif args.action == "sync":
            print(f"wrote {members.sync(settings, _stderr)}")
        elif args.action == "admin":
            from ctxpress.console.admins import make_admin

            password = make_admin(settings, actor, args.name, sys.stdin.readline().rstrip("\n")
                                  if args.password_stdin else None, reset=args.reset)
            if password is not None:
                print(password)
            print(f"console admin {args.name} {'has a new password' if args.reset else 'added'}"
                  f"{'; the password above is shown once' if password is not None else ''}; sign in at "
                  f"{settings.console_url()}", file=sys.stderr)
    except (store.UnknownUser, store.UserExists, AdminExists, ValueError) as exc:
        return _fail(str(exc), 2)
    except identity.TeamConfigError as exc:
        return _fail(str(exc))
    return 0


def register(subparsers: Any) -> None:
    users = subparsers.add_parser("users", help="team mode: developers, their repositories and credentials files")
    sub = users.add_subparsers(dest="action", required=True)

    add = sub.add_parser("add", help="add a developer; prints the credentials file their editor reads")
    hooks = sub.add_parser("hooks", help="add a hooks user (a CI runner, a server's checkout): its git hooks index "
                                         "only the repositories given; prints its credentials file")
    rotate = sub.add_parser("rotate", help="a new password for a user (the old one stops working); prints the new "
                                           "credentials file; renews their bridge token (users/<name>.token)")
    for cmd in (add, hooks, rotate):
        cmd.add_argument("name")
        cmd.add_argument("--out", type=Path, help="write the credentials file here (mode 0600) instead of stdout")
        cmd.add_argument("--url", help="the NATS URL their machine connects to (default: this appliance's)")
    for cmd in (add, hooks):
        cmd.add_argument("--repos", type=_repositories, required=True, help="repositories they may use: A,B")
    for action, what in (("grant", "let them use more repositories"), ("revoke", "take repositories away")):
        cmd = sub.add_parser(action, help=what)
        cmd.add_argument("name")
        cmd.add_argument("--repos", type=_repositories, required=True, help="A,B")
    remove = sub.add_parser("remove", help="remove a developer (their connections are closed)")
    remove.add_argument("name")
    listing = sub.add_parser("list", help="developers and their repositories")
    listing.add_argument("--json", action="store_true")
    sub.add_parser("sync", help="rewrite the NATS authorization block from PostgreSQL and reload NATS")
    admin = sub.add_parser("admin", help="a team console admin (`ctxpress console`); prints a generated password once")
    admin.add_argument("name")
    admin.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
    admin.add_argument("--reset", action="store_true", help="a new password for an existing admin (signs them out)")
    for cmd in sub.choices.values():
        cmd.set_defaults(func=_cmd_users)


def _cmd_deploy(args: argparse.Namespace, settings: Settings) -> int:
    from sqlalchemy.exc import ProgrammingError

    from ctxpress import deployment
    from ctxpress_core import identity

    try:
        if args.action == "setup":
            nodes = [deployment.NatsNode.parse(spec) for spec in args.node]
            written = deployment.setup(settings, nodes, listen_host=args.listen_host, mounted_at=args.mounted_at,
                                       store_dir=args.store_dir, names=tuple(args.name))
            what = "the TLS, NATS and service credentials files"
        else:
            written = deployment.roles(settings, args.host)
            what = "each service's database URL (its own role)"
    except (ValueError, identity.TeamConfigError) as exc:
        return _fail(str(exc), 2)
    except ProgrammingError as exc:  # one that is down is said by ctxpress/unavailable.py
        return _fail(f"database: {str(exc.orig or exc).splitlines()[0]} (CTXPRESS_DATABASE_URL must be a superuser's)")
    for path in written:
        print(f"  {path}", file=sys.stderr)
    print(f"wrote {what} under {settings.state_dir} ({len(written)} files)")
    return 0


def register_deploy(subparsers: Any) -> None:
    deploy = subparsers.add_parser("deploy", help="a team deployment across machines: the files compose and k8s mount")
    sub = deploy.add_subparsers(dest="action", required=True)
    setup = sub.add_parser("setup", help="TLS for the NATS cluster, each node's config, the services' credentials")
    setup.add_argument("--node", action="append", required=True,
                       help="name=host[:client_port[:cluster_port[:monitor_port]]], once per NATS node")
    setup.add_argument("--listen-host", default="0.0.0.0", help="the address each node listens on")
    setup.add_argument("--mounted-at", type=Path, help="where the servers see this state directory (a container's "
                                                       "mount; default: where it is)")
    setup.add_argument("--store-dir", type=Path, help="each node's JetStream directory (default: under the state "
                                                      "directory, one per node)")
    setup.add_argument("--name", action="append", default=[],
                       help="another name or address clients reach NATS by (the certificate lists it)")
    roles = sub.add_parser("roles", help="each service's PostgreSQL role (run with a superuser's "
                                         "CTXPRESS_DATABASE_URL); writes database/<service>.url")
    roles.add_argument("--host", help="the database host the services reach (default: the superuser URL's)")
    for cmd in sub.choices.values():
        cmd.set_defaults(func=_cmd_deploy)

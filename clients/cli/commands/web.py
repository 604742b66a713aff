"""`tether web`: serve the page that shows every workspace's sessions in a browser, and relay it
to their daemons (`tether.clients.web`, docs/web.md), until Ctrl-C."""

import argparse
import errno
import ssl
from typing import NoReturn

from tether.clients.cli.exit_codes import EXIT_OK, EXIT_USAGE, CliError


def cmd_web(args: argparse.Namespace) -> int:
    from tether.clients.web.security import is_loopback, is_wildcard

    host: str = args.host
    if (args.certfile is None) != (args.keyfile is None):
        raise CliError("--certfile and --keyfile go together", EXIT_USAGE)
    if is_wildcard(host):
        raise CliError(
            f"--host {host} listens on every address, and a page must name the one it reached;"
            " give the address to serve on (a VPN address, say)",
            EXIT_USAGE,
        )
    if not is_loopback(host) and args.certfile is None:
        raise CliError(
            f"--host {host} is not a loopback address: anyone on that network could read the"
            " token and the sessions over plain http; give --certfile and --keyfile to serve"
            " https, or keep the default 127.0.0.1 and forward the port"
            " (ssh -L 8737:127.0.0.1:8737 HOST, see docs/web.md)",
            EXIT_USAGE,
        )
    context = None
    if args.certfile is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(args.certfile, args.keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"cannot use the certificate or key: {exc}", EXIT_USAGE) from exc
    import trio

    from tether.clients.web.security import Gate
    from tether.clients.web.server import WebServer

    token = secret = None
    if args.port:
        from tether.clients.web.credentials import kept_credentials

        try:
            token, secret = kept_credentials(args.port, renew=args.new_token)
        except OSError as exc:
            raise CliError(f"cannot keep the sign-in token: {exc}", EXIT_USAGE) from exc
    server = WebServer(host, args.port, ssl_context=context, token=token, secret=secret)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            gate: Gate = await nursery.start(server.serve)
            print(f"tether web: {gate.url}", flush=True)
            if args.open:
                import webbrowser

                webbrowser.open(gate.url)

    try:
        trio.run(main)
    except BaseExceptionGroup as group:
        if group.subgroup(KeyboardInterrupt) is None:
            refused = group.subgroup(OSError)
            if refused is None:
                raise
            _refuse(host, args.port, _first(refused))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        _refuse(host, args.port, exc)
    return EXIT_OK


def _first(group: BaseExceptionGroup[OSError]) -> OSError:
    leaf: OSError | BaseExceptionGroup[OSError] = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


def _refuse(host: str, port: int, exc: OSError) -> NoReturn:
    if exc.errno == errno.EADDRINUSE:
        raise CliError(
            f"port {port} on {host} is in use (another tether web?); choose another with --port",
            EXIT_USAGE,
        ) from exc
    raise CliError(f"cannot listen on {host}:{port}: {exc}", EXIT_USAGE) from exc

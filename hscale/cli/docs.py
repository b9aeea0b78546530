"""``hscale docs [NAME]``: the documentation that ships with the kit, printed (markdown). Without
a name, the list. The same files as docs/ in the repository.

Exit codes: 0, or 2 (no such document: the list is printed with the error)."""

from __future__ import annotations

import argparse
import importlib.resources

from .args import fail

#: The shipped documents, in the order a vendor reads them (pyproject.toml ships these).
SHIPPED = {
    "backends": "the backend contract: what to implement, declare and return; a complete adapter",
    "conformance": "the suite: running it, profiles, allowances, the certificate",
    "spec": "the normative specification, clause by clause",
    "vectors": "the golden vectors and their formats, for hardware teams",
    "interop": "what the real NVFP4 libraries do differently, measured",
    "cli": "every command and its exit codes",
}


def add_parser(commands) -> None:
    p = commands.add_parser("docs", help="print the documentation shipped with the kit "
                                         "(backends, conformance, spec, vectors, ...)",
                            description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", default=None,
                   help="one of " + ", ".join(SHIPPED) + " (default: list them)")
    p.set_defaults(func=run)


def text_of(name: str) -> str:
    return importlib.resources.files("hscale.docs").joinpath(f"{name}.md").read_text(
        encoding="utf-8")


def listing() -> str:
    width = max(map(len, SHIPPED))
    return "\n".join(f"  {name:<{width}}  {what}" for name, what in SHIPPED.items())


def run(args) -> int:
    if args.name is None:
        print("The documents shipped with the kit (hscale docs NAME prints one):")
        print(listing())
        return 0
    name = args.name.removesuffix(".md")
    if name not in SHIPPED:
        return fail("hscale docs", f"no document {args.name!r}; one of: {', '.join(SHIPPED)}")
    print(text_of(name), end="")
    return 0

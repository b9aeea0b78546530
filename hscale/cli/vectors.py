"""The ``hscale vectors`` command: generate, verify, check, expect, explain, clauses.

``add_parser(subparsers)`` adds the ``vectors`` sub-command to the ``hscale`` parser;
``run_vectors(args)`` runs it and returns the exit status.
"""

from __future__ import annotations

import argparse
import difflib
import json
import time
from pathlib import Path

from hscale.files import write_text
from hscale.judge.findings import plural
from hscale.vectors import LEVEL0_DIR as DEFAULT_LEVEL0_DIR

from .args import UsageError, check_at_least, check_output_file, error_text, fail


def _family_options(parser, command: str) -> None:
    """Each vector family's option (``--profile``, ``--recipe``, ``--gemm-model``, ...): the
    kinds' rows name the families (hscale.judge.kinds), each family's ``CHOICE`` its option
    (for ``expect``, where it has an ``expect_help``)."""
    from hscale.vectors.families import families
    for family in families().values():
        choice = family.CHOICE
        text = choice.check_help if command == "check" else choice.expect_help
        if text:
            parser.add_argument(choice.option, default=None,
                                metavar=choice.name.split()[-1].upper(), help=text)
    if command == "check":  # the options declaring each family's domain (its CHOICE's)
        for family in families().values():
            for option in family.CHOICE.domain_options:
                parser.add_argument(option.option, default=None, metavar=option.metavar,
                                    help=option.help,
                                    action="append" if option.repeatable else "store")


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    from hscale.vectors.catalogue import DEFAULT_SEED

    commands = parser.add_subparsers(dest="vectors_command", metavar="COMMAND")
    commands.required = True

    p = commands.add_parser("generate", help="generate a level of golden vectors into DIR")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--level", type=int, default=0, choices=(0, 1, 2),
                   help="0: named edge cases (the committed set), 1: exhaustive sweeps, "
                        "2: large seeded random sweeps (default 0)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help=f"seed of the random cases (default {DEFAULT_SEED})")
    p.add_argument("--cases", type=int, default=None,
                   help="level 2: number of random tensors (default 64)")
    p.add_argument("--subset", default=None,
                   help="level 1: only the sweeps whose case ID starts with this")
    p.add_argument("--no-clean", action="store_true",
                   help="keep vector files in DIR that this run does not write")

    p = commands.add_parser("verify", help="recompute DIR from its stored inputs; exit 1 on "
                                           "any drift (content or checksum)")
    p.add_argument("dir", type=Path, nargs="?", default=DEFAULT_LEVEL0_DIR,
                   help="vector directory (default: the committed level-0 set)")

    p = commands.add_parser("check", help="compare a third-party result file with DIR "
                                          "(TestFloat-style report)")
    p.add_argument("dir", type=Path, nargs="?", default=DEFAULT_LEVEL0_DIR,
                   help="vector directory (default: the committed level-0 set), a directory "
                        "of set files without a manifest, or one set's file (<set>.json, or "
                        "its .hex beside the .json)")
    p.add_argument("--observed", required=True, type=Path,
                   help="result file: lines 'KEY row group scale_byte packed_hex "
                        "[swizzled_offset_hex]', optionally 'KEY gs s_g_hex' (the multiplier) "
                        "or 'KEY gsr r_hex' (the stored reciprocal, NVFP4-GS-4); KEY is a case "
                        "id or SET:CASE_INDEX (see docs/vectors.md)")
    p.add_argument("--errors", type=int, default=20, help="stop after N errors (default 20)")
    p.add_argument("--require-all", action="store_true",
                   help="also fail when groups of the vectors are missing from the file")
    _family_options(p, "check")

    p = commands.add_parser("expect", help="write the observed file a conforming "
                                           "implementation would produce for DIR")
    p.add_argument("dir", type=Path, nargs="?", default=DEFAULT_LEVEL0_DIR,
                   help="vector directory (default: the committed level-0 set)")
    p.add_argument("--out", default="-",
                   help="file to write ('-', the default: standard output); never a device, a "
                        "symbolic link or anything but a regular file")
    p.add_argument("--no-gs", action="store_true", help="leave out the 'gs' lines")
    p.add_argument("--index-keys", action="store_true",
                   help="key the lines SET:CASE_INDEX (as a bench that knows only the .hex "
                        "file's case table writes them) instead of by case id")
    p.add_argument("--swizzled", action="store_true",
                   help="add each scale byte's offset in the 128x4 swizzled layout "
                        "(NVFP4-PACK-3) as a sixth field")
    p.add_argument("--reciprocal", action="store_true",
                   help="write the global scale as the stored reciprocal ('gsr' lines, "
                        "NVFP4-GS-4) instead of the multiplier ('gs')")
    _family_options(p, "expect")

    p = commands.add_parser("explain", help="one group worked end to end: inputs, s_g, every "
                                            "candidate's objective, the chosen byte; for a "
                                            "GEMM case, output element (ROW, GROUP) = (i, j)")
    p.add_argument("dir", type=Path, nargs="?", default=DEFAULT_LEVEL0_DIR,
                   help="vector directory (default: the committed level-0 set)")
    p.add_argument("case")
    p.add_argument("row", type=int, nargs="?", default=0)
    p.add_argument("group", type=int, nargs="?", default=0)

    p = commands.add_parser("clauses", help="print the clause -> case table (markdown)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)

    return parser


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``vectors`` to the ``hscale`` command's sub-parsers."""
    parser = subparsers.add_parser(
        "vectors", help="golden test vectors: generate, verify, check third-party results",
        description="Golden test vectors for H-Scale NVFP4 (docs/vectors.md).")
    configure_parser(parser)
    parser.set_defaults(func=run_vectors)
    return parser


def run_vectors(args) -> int:
    """Run the command. A bad argument, a missing or unreadable file, vectors that are damaged:
    one line on stderr and exit 2 (MalformedVectors and UnreadableObserved are ValueErrors)."""
    try:
        return _run(args)
    except (OSError, ValueError) as error:
        return fail(f"hscale vectors {args.vectors_command}", error_text(error))


def _generation_options(args) -> dict:
    """The options of ``generate``'s level, each checked: an option of another level is an
    error rather than ignored."""
    if args.subset is not None and args.level != 1:
        raise UsageError(f"--subset applies to level 1 only (this is level {args.level})")
    if args.cases is not None and args.level != 2:
        raise UsageError(f"--cases applies to level 2 only (this is level {args.level})")
    if args.level == 2:
        check_at_least("--cases", 64 if args.cases is None else args.cases, 1)
        return {} if args.cases is None else {"cases": args.cases}
    return {"subset": args.subset} if args.subset else {}


def _generate(args) -> int:
    from hscale.vectors.formats import MANIFEST
    from hscale.vectors.generate import generate_files, write_files
    check_at_least("--seed", args.seed, 0)
    options = _generation_options(args)
    if str(args.out) == "-":
        raise UsageError("--out -: generate writes a directory of files, not standard output")
    try:  # before the work: a directory that cannot be made fails now
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--out {args.out}: cannot create the directory "
                         f"({error.strerror or error})") from None
    start = time.perf_counter()
    files = generate_files(args.level, args.seed, **options)
    if json.loads(files[MANIFEST])["case_count"] == 0:
        from hscale.vectors.sweeps import level1_cases
        sweeps = sorted({"-".join(case.id.split("-")[:2]) for case in level1_cases(args.seed)})
        raise UsageError(f"--subset {args.subset}: no level-1 case ID starts with it; the "
                         f"sweeps are {', '.join(sweeps)}")
    write_files(args.out, files, clean=not args.no_clean)
    size = sum(len(d) for d in files.values())
    print(f"level {args.level}, seed {args.seed}: {plural(len(files), 'file')}, "
          f"{plural(size, 'byte')} in {args.out} ({time.perf_counter() - start:.1f} s)")
    return 0


def _chosen_family(args) -> str:
    """The vector family ``check`` or ``expect`` works on: the one whose option is given, else
    the one with a ``default`` (the weight sets, judged under the exact profile); a usage error
    when two are given."""
    from hscale.vectors.families import families
    chosen = [kind for kind, family in families().items()
              if getattr(args, family.CHOICE.dest, None)]
    if len(chosen) > 1:
        raise UsageError(" and ".join(families()[k].CHOICE.option for k in chosen)
                         + ": one kind's sets at a time")
    if chosen:
        return chosen[0]
    return next(kind for kind, family in families().items() if family.CHOICE.default)


def _family(kind: str):
    from hscale.vectors.families import families
    return families()[kind]


def _choice_value(args, kind: str, declared=None) -> str:
    """The value of the kind's option (its ``default`` when not given), checked with the
    ``declared`` domain: a usage error when the family does not judge under it."""
    choice = _family(kind).CHOICE
    value = getattr(args, choice.dest, None) or choice.default
    try:
        choice.accept(value, declared)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return value


def _family_cases(directory, kind: str) -> tuple[list, str]:
    """(the cases of DIR's sets of ``kind``, the note on DIR's checksums), or a usage error
    when it has none."""
    from hscale.vectors.stored import open_vectors
    family = _family(kind)
    opened = open_vectors(directory)
    cases = [case for name, case in opened.by_kind[kind].values()]
    if not cases:
        raise UsageError(f"{directory}: no {kind} set ({family.SET_PREFIX}*.json) in it: "
                         f"{family.CHOICE.option} judges the {kind} kind's vectors")
    return cases, opened.note


def _check_family(args, kind: str) -> int:
    """``check``: the observed file judged against DIR's sets of the kind, as the family's
    option says (``--profile P``: a weight quantizer under profile P; ``--recipe R``: an R
    kernel; ``--gemm-model M``: an M GEMM)."""
    from hscale.vectors.observed import read_observed
    check_at_least("--errors", args.errors, 1)
    choice = _family(kind).CHOICE
    declared = _declared_domain(args, kind)
    value = _choice_value(args, kind, declared)
    cases, note = _family_cases(args.dir, kind)
    lines = read_observed(args.observed)
    if note:
        print(note)
    report, errors = _family(kind).check_lines(cases, lines, value, args.errors,
                                               args.require_all, declared)
    for line in report + choice.verdict(str(args.observed), str(args.dir), kind, choice, value,
                                        errors):
        print(line)
    return 1 if errors else 0


def _declared_domain(args, kind: str):
    """The declared domain ``check`` judges under, read by the kind's family's ``CHOICE`` from
    the options it declares (None: it declares none); an option of another kind's domain is a
    usage error rather than ignored."""
    from hscale.vectors.families import families
    for other, family in families().items():
        for option in family.CHOICE.domain_options:
            if other != kind and getattr(args, option.dest, None) is not None:
                raise UsageError(f"{option.option} applies with {family.CHOICE.option} only")
    choice = _family(kind).CHOICE
    try:
        return choice.declared({o.dest: getattr(args, o.dest) for o in choice.domain_options})
    except ValueError as error:
        raise UsageError(str(error)) from None


def _unknown_case(case_id: str, vectors: dict, directory) -> str:
    close = difflib.get_close_matches(case_id, list(vectors), n=3)
    hint = (f"; did you mean {' or '.join(close)}?" if close else
            " (hscale vectors expect DIR lists the cases)")
    return f"{directory}: no case {case_id!r}{hint}"


def _run(args) -> int:
    command = args.vectors_command
    if command == "generate":
        return _generate(args)
    if command == "verify":
        from hscale.vectors.verify import verify_dir
        problems = verify_dir(args.dir)
        for problem in problems:
            print(f"DRIFT {problem}")
        if problems:
            print(f"{args.dir}: {plural(len(problems), 'problem')}; the vectors do not match "
                  "the reference")
            return 1
        print(f"{args.dir}: OK (every case recomputed from its stored inputs, every checksum "
              "matches)")
        return 0
    if command == "check":
        return _check_family(args, _chosen_family(args))
    if command == "expect":
        check_output_file("--out", args.out)  # before the work
        kind = _chosen_family(args)
        choice, value = _family(kind).CHOICE, _choice_value(args, kind)
        cases, _ = _family_cases(args.dir, kind)
        lines = _family(kind).expect_lines(
            cases, value, not args.no_gs,
            **{name: getattr(args, name) for name in choice.expect_options})
        write_text(args.out, "\n".join(lines) + "\n")
        return 0
    if command == "explain":
        from hscale.vectors.families import families
        from hscale.vectors.stored import open_vectors
        if not Path(args.dir).exists() and args.case.isdigit():  # CASE ROW [GROUP], no DIR
            args.dir, args.case, args.row, args.group = (DEFAULT_LEVEL0_DIR, str(args.dir),
                                                         int(args.case), args.row)
        opened = open_vectors(args.dir)
        kind = opened.kind_of(args.case)
        if kind is None:
            raise UsageError(_unknown_case(args.case, opened.every_case, args.dir))
        file_name, case = opened.by_kind[kind][args.case]
        print(families()[kind].explain(file_name, case, args.row, args.group))
        return 0
    if command == "clauses":
        from hscale.vectors.docs import clause_table
        check_at_least("--seed", args.seed, 0)
        print(clause_table(args.seed))
        return 0
    raise AssertionError(command)

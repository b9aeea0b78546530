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
    """Each vector family's option (``--recipe``, ``--gemm-model``, ...): the kinds' rows name
    the families (hscale.judge.kinds), each family's ``CHOICE`` its option."""
    from hscale.vectors.families import families
    for family in families().values():
        choice = family.CHOICE
        parser.add_argument(choice.option, default=None, metavar=choice.name.split()[-1].upper(),
                            help=choice.check_help if command == "check" else choice.expect_help)
    if command == "check":  # the options declaring each family's domain (its CHOICE's)
        for family in families().values():
            for option in family.CHOICE.domain_options:
                parser.add_argument(option.option, default=None, metavar=option.metavar,
                                    help=option.help)


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
    p.add_argument("--profile", default="exact", metavar="PROFILE",
                   help="exact (default: bit for bit), faithful (the certificate, with the "
                        "divergences --allow names) or format (the format clauses only), as "
                        "the conformance suite judges")
    p.add_argument("--allow", action="append", default=[], metavar="NAME",
                   help="an allowance of the faithful or format profile (repeatable), e.g. "
                        "reciprocal-multiply; the names of docs/spec.md section 7")
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


def _chosen_family(args) -> str | None:
    """The vector family ``check`` or ``expect`` works on (its option given), or None for the
    weight sets; a usage error when two are, or when the value is not one of the family's."""
    from hscale.vectors.families import families
    chosen = [kind for kind, family in families().items()
              if getattr(args, family.CHOICE.dest, None)]
    if len(chosen) > 1:
        raise UsageError(" and ".join(families()[k].CHOICE.option for k in chosen)
                         + ": one kind's sets at a time")
    if not chosen:
        return None
    choice = families()[chosen[0]].CHOICE
    value = getattr(args, choice.dest)
    if value not in choice.choices():
        raise UsageError(f"{choice.option} {value}: one of {', '.join(choice.choices())}")
    return chosen[0]


def _family(kind: str):
    from hscale.vectors.families import families
    return families()[kind]


def _family_cases(directory, kind: str) -> list:
    """The cases of DIR's sets of ``kind``, or a usage error when it has none."""
    from hscale.vectors.check import open_vectors
    family = _family(kind)
    cases = [case for name, case in open_vectors(directory).family_cases.values()
             if name.startswith(family.SET_PREFIX)]
    if not cases:
        raise UsageError(f"{directory}: no {kind} set ({family.SET_PREFIX}*.json) in it: "
                         f"{family.CHOICE.option} judges the {kind} kind's vectors")
    return cases


def _check_family(args, kind: str) -> int:
    """``check --recipe R`` or ``check --gemm-model M``: the observed file's cases of the kind
    judged as an R kernel's (an M GEMM's)."""
    check_at_least("--errors", args.errors, 1)
    declared = _declared_domain(args, kind)
    choice_name = _family(kind).CHOICE.name
    choice = getattr(args, _family(kind).CHOICE.dest)
    cases = _family_cases(args.dir, kind)
    try:
        lines = Path(args.observed).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--observed {args.observed}: cannot be read ({error})") from None
    report, errors = _family(kind).check_lines(cases, lines, choice, args.errors,
                                               args.require_all, declared)
    for line in report:
        print(line)
    if errors:
        print(f"{args.observed}: {plural(errors, 'error')} ({choice_name} {choice})")
        return 1
    print(f"{args.observed}: conforms to the {kind} vectors of {args.dir} under the "
          f"{choice} {choice_name}")
    return 0


def _declared_domain(args, kind: str | None):
    """The declared domain ``check --require-all`` asks the cases of, read by the kind's
    family's ``CHOICE`` from the options it declares (None: it declares none); an option of
    another kind's domain is a usage error rather than ignored."""
    from hscale.vectors.families import families
    for other, family in families().items():
        for option in family.CHOICE.domain_options:
            if other != kind and getattr(args, option.dest, None) is not None:
                raise UsageError(f"{option.option} applies with {family.CHOICE.option} only")
    if kind is None:
        return None
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
    family = _chosen_family(args) if command in ("check", "expect") else None
    if command == "check" and family:
        return _check_family(args, family)
    if command == "check":
        _declared_domain(args, None)  # a domain option without its family: a usage error
        from hscale.judge.profiles import check_profile
        from hscale.vectors.check import check
        check_at_least("--errors", args.errors, 1)
        try:
            profile, allowances = check_profile(args.profile, tuple(dict.fromkeys(args.allow)))
        except ValueError as error:
            raise UsageError(f"--profile {args.profile}"
                             + "".join(f" --allow {a}" for a in args.allow)
                             + f": {error}") from None
        return check(args.dir, args.observed, max_errors=args.errors,
                     require_all=args.require_all, profile=profile, allowances=allowances)
    if command == "expect":
        from hscale.vectors.check import observed_lines
        check_output_file("--out", args.out)  # before the work
        if family:
            cases = _family_cases(args.dir, family)
            module = _family(family)
            lines = module.expect_lines(cases, getattr(args, module.CHOICE.dest), not args.no_gs)
            write_text(args.out, "\n".join(lines) + "\n")
            return 0
        lines = observed_lines(args.dir, not args.no_gs, index_keys=args.index_keys,
                               swizzled=args.swizzled, reciprocal=args.reciprocal)
        write_text(args.out, "\n".join(lines) + "\n")
        return 0
    if command == "explain":
        from hscale.vectors.check import open_vectors
        from hscale.vectors.explain import explain_group
        from hscale.vectors.families import families
        if not Path(args.dir).exists() and args.case.isdigit():  # CASE ROW [GROUP], no DIR
            args.dir, args.case, args.row, args.group = (DEFAULT_LEVEL0_DIR, str(args.dir),
                                                         int(args.case), args.row)
        opened = open_vectors(args.dir)
        if args.case in opened.family_cases:
            file_name, case = opened.family_cases[args.case]
            kind = next(k for k, m in families().items() if file_name.startswith(m.SET_PREFIX))
            print(families()[kind].explain(file_name, case, args.row, args.group))
            return 0
        if args.case not in opened.cases:
            raise UsageError(_unknown_case(args.case, {**opened.cases, **opened.family_cases},
                                           args.dir))
        print(explain_group(*opened.cases[args.case], args.row, args.group))
        return 0
    if command == "clauses":
        from hscale.vectors.docs import clause_table
        check_at_least("--seed", args.seed, 0)
        print(clause_table(args.seed))
        return 0
    raise AssertionError(command)

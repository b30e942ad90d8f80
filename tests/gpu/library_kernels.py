"""What the static kernel checks share: their arguments, the kernels' SASS, kernel names in
the rules' form, and the report (tests/gpu/kernel_stack_check.py, pdl_wait_check.py,
softmax_overlap_check.py)."""
import argparse
import re
import subprocess
import sys


def parse_args(doc):
    """LIBRARY [--cuobjdump PATH] [--cxxfilt PATH], described by the check's docstring."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("library")
    ap.add_argument("--cuobjdump", default="cuobjdump")
    ap.add_argument("--cxxfilt", default="c++filt")
    return ap.parse_args()


def functions(library, cuobjdump):
    """(mangled name, [instruction text]) of every kernel in the library."""
    out = subprocess.run([cuobjdump, "-sass", library], check=True, capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            found.append((m.group(1), []))
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?);", line)
        if m and found:
            found[-1][1].append(m.group(1))
    return found


def plain_names(mangled, cxxfilt):
    """The kernels' demangled names without namespaces or return type (the rules' form)."""
    names = subprocess.run([cxxfilt], input="\n".join(mangled), check=True, capture_output=True,
                           text=True).stdout.splitlines()
    if len(names) != len(mangled):
        raise SystemExit(f"c++filt returned {len(names)} names for {len(mangled)}")
    plain = []
    for n in names:
        n = re.sub(r"^void ", "", n)
        n = n.replace("(anonymous namespace)::", "")
        n = re.sub(r"\b[a-z_]+::", "", n)  # lowbit::cuda::kv:: and the like
        plain.append(n)
    return plain


def report(tool, library, kernels, rules, matched, failures):
    """Prints the failures (a rule that matched no kernel is one) and a summary; the exit code."""
    for i, rule in enumerate(rules):
        if matched[i] == 0:
            failures.append(f"rule {rule[0]!r} matches no kernel of {library}")
    for f in failures:
        print(f"{tool}: {f}", file=sys.stderr)
    print(f"{tool}: {kernels} kernels, {sum(matched)} under {len(rules)} rules, {len(failures)} failures")
    return 1 if failures else 0


def run_sass_rules(tool, doc, rules, check):
    """The SASS checks' driver: each kernel of the library (LIBRARY and options as
    parse_args reads them from `doc`) goes to the first rule whose pattern (rule[0]) finds
    its plain name, and check(name, code, rule) returns a failure message or None; the exit
    code (report's)."""
    args = parse_args(doc)
    found = functions(args.library, args.cuobjdump)
    if not found:
        print(f"{tool}: no kernels in {args.library}", file=sys.stderr)
        return 1
    names = plain_names([mangled for mangled, _ in found], args.cxxfilt)
    matched = [0] * len(rules)
    failures = []
    for name, (_, code) in zip(names, found):
        for i, rule in enumerate(rules):
            if re.search(rule[0], name):
                matched[i] += 1
                failure = check(name, code, rule)
                if failure:
                    failures.append(failure)
                break
    return report(tool, args.library, len(found), rules, matched, failures)

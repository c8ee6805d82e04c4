"""The load-safety verdict as report findings: refused imports, unsafe archives, ``--trust``."""

from __future__ import annotations

from auditor.load.allowlist import ImportPolicy, is_unknown_import
from auditor.load.problems import IMPORT_OPCODES
from auditor.report.model import Finding, LoadSafety, Severity
from auditor.report.sources import cite

_PICKLE_REFS = [
    cite("lit:pickle", "'Warning: the pickle module is not secure'"),
    cite("lit:pickle", "'Restricting Globals' (the gate auditor loads through)"),
]


def load_findings(safety: LoadSafety, policy: ImportPolicy) -> list[Finding]:
    """Turn the load-safety verdict and trust flags into core findings.

    An import refused only for being unknown (most often the user's own class) is ``high``
    ``load.unknown-class``, its reason naming the ``--import`` that admits it when the pickle builds it as
    a class (a call is never admitted, so none is suggested); everything else that refused the
    load (a denied callable, a malformed stream, unsafe TorchScript or archive layout) is ``critical``.
    """
    findings = []
    for issue in safety.issues:
        name = f"{issue.module}.{issue.name}" if issue.module else (issue.name or issue.opcode)
        unknown = issue.opcode in IMPORT_OPCODES and is_unknown_import(issue.module, issue.name, policy)
        evidence = {"import": name, "opcode": issue.opcode, "position": issue.position, "pickle": issue.pickle}
        message = f"{name} ({issue.opcode} at byte {issue.position}) in {issue.pickle}: {issue.reason}."
        rule_id, severity, title, ending = (
            ("load.unknown-class", Severity.HIGH, f"Checkpoint imports {name}, which is not on the allowlist; "
             "load refused", "Nothing was unpickled.") if unknown
            else ("load.unsafe-pickle", Severity.CRITICAL, f"Checkpoint refused as unsafe: {name}",
                  "Nothing was unpickled or executed."))
        findings.append(Finding(
            rule_id=rule_id, severity=severity, title=title, message=f"{message} {ending}",
            location=issue.pickle, evidence=evidence, references=_PICKLE_REFS, remediation=["resave-as-safetensors"],
        ))
    if policy.trust_all and safety.verdict == "safe":
        findings.append(Finding(
            rule_id="load.trust-all", severity=Severity.MEDIUM,
            title="--trust was used: classes outside the allowlist were unpickled",
            message=("The static check passed (no denylisted import), but the user allowed every module to be "
                     "imported during unpickling. Only use --trust on checkpoints from a source you trust."),
            evidence={"globals_seen": safety.globals_seen[:30]}, references=_PICKLE_REFS,
            remediation=["resave-as-safetensors"],
        ))
    return findings

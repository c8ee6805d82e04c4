"""``auditor reparam-check``: load the forms safely, fuse when needed, compare, explain (all in a jailed job)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from auditor.audit.inputs import image_shape
from auditor.commands.model import ModelOptions, load_model
from auditor.errors import InputError
from auditor.graph.profile import profile_model
from auditor.jail.protocol import ReparamDone, ReparamTask
from auditor.reparam.check import EquivalenceResult, check_equivalence
from auditor.reparam.fuse import fuse_model

CONSEQUENCE = (
    "The deploy form computes the same function as the training form, so it has the same input "
    "gradients (Koh et al. 2024, Sec. 2.9, Eq. 7): it inherits every gradient-based model-inversion risk of "
    "the training form, including that of the skip connections the fusion hid (arch.last-stage-skip "
    "on the training form; arch.fused-reparameterized-conv on the deploy form). Koh et al. 2024, Tables 4 and 7: "
    "PPA attack accuracy on training-time and inference-time RepVGG agrees within about 1 point."
)


@dataclass
class ReparamReport:
    """The equivalence result plus the hidden-skip evidence and the finding text."""

    result: EquivalenceResult
    hidden_skips: list[str] = field(default_factory=list)
    deploy_skips: int = 0
    finding: str = ""

    def to_dict(self) -> dict:
        """Return the ``--json`` document (the result's fields plus the evidence)."""
        out = self.result.to_dict()
        out.update(hidden_skips=self.hidden_skips, deploy_skips=self.deploy_skips, finding=self.finding)
        return out


@dataclass(frozen=True)
class ReparamOptions:
    """The training form (with its loading flags), the deploy form if given, and the comparison batch."""

    train: ModelOptions
    deploy: Path | None = None
    deploy_arch: str | None = None
    batch: int = 4
    seed: int = 0


def run_reparam_check(opts: ReparamOptions) -> ReparamReport:
    """Compare a training-form checkpoint with its deploy form (fused here when not given), in a jailed job.

    Raises:
        InputError: a checkpoint cannot be loaded or was refused, or there is nothing to fuse and no deploy model.
    """
    from auditor.audit.jobs import command_answer, owned

    deploy = None if opts.deploy is None else ModelOptions(opts.deploy, arch=opts.deploy_arch or opts.train.arch,
                                                           imports=opts.train.imports)
    task = ReparamTask(train=opts.train.source(), deploy=None if deploy is None else deploy.source(),
                       batch=opts.batch, seed=opts.seed)
    inputs = [opts.train.path, *([] if opts.deploy is None else [opts.deploy])]
    label = str(opts.train.path)
    done = command_answer(reparam_job, task, ReparamDone, inputs=inputs, config=opts.train.config(), work="static",
                          label=label)
    return ReparamReport(result=owned(EquivalenceResult, done.result, label), hidden_skips=done.hidden_skips,
                         deploy_skips=done.deploy_skips, finding=done.finding)


def reparam_job(task: Mapping[str, object], say: Callable[[str], None]) -> dict[str, object]:
    """The jailed child's part of ``auditor reparam-check``: load both forms (or fuse), compare, explain.

    Raises:
        InputError: a checkpoint cannot be loaded, or there is nothing to fuse and no deploy model.
    """
    from pydantic import TypeAdapter

    t = ReparamTask.model_validate(task)
    train, example = load_model(t.train, tokens=False)
    shape = image_shape(example)
    fused, blocks = fuse_model(train)
    if t.deploy is None:
        if not blocks:
            raise InputError(f"{t.train.path}: no reparameterisable block (RepVGG/MobileOne/FastViT, conv+BN) "
                             "to fuse; pass the deploy model as the second argument")
        deploy = fused
        by = "auditor.reparam.fuse_model (timm's own reparameterize where the block has one)"
    else:
        deploy = load_model(t.deploy, tokens=False)[0]
        by = f"given ({t.deploy.path})"
    say("comparing the forms")
    result = check_equivalence(train, deploy, shape, blocks, batch=t.batch, seed=t.seed)
    result.fused_by = by
    train_profile, deploy_profile = profile_model(train, shape), profile_model(deploy, shape)
    hidden = [f"{s.node} ({s.kind}, stage {s.stage})" for s in train_profile.skip_connections]
    if result.equivalent:
        finding = CONSEQUENCE
    else:
        bad = [f"{b.name} ({b.cause})" for b in result.blocks if not b.equivalent]
        finding = (f"The forms differ (max abs output error {result.max_abs_error_output:.3g} in float32, "
                   f"{result.max_abs_error_output_fp64:.3g} in float64 against a storage floor of "
                   f"{result.storage_floor_output_fp64:.3g}); failing blocks: "
                   f"{'; '.join(bad) or 'none individually (end to end only)'}. Fix the fusion before deploying; "
                   "a correct fusion would inherit the training form's inversion risk.")
    return ReparamDone(result=TypeAdapter(EquivalenceResult).dump_json(result).decode(), hidden_skips=hidden,
                       deploy_skips=len(deploy_profile.skip_connections), finding=finding).model_dump(mode="json")

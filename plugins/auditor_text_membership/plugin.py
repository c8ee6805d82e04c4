"""The text-membership plugin: blind baseline, token-probability attacks, verbatim extraction, canary exposure."""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Artifact,
    PluginResult,
    PluginSkipped,
    Requirements,
    Rule,
    RunContext,
    svg_artifact,
)
from auditor_text_membership.blind import blind_baseline
from auditor_text_membership.canaries import exposures
from auditor_text_membership.config import TextMembershipConfig
from auditor_text_membership.control import run_control
from auditor_text_membership.data import TextData, encode, load_text_data, load_tokenizer
from auditor_text_membership.evidence import AttackAUC, Extracted, Extraction, ReferenceInfo, plain
from auditor_text_membership.extraction import examples, extract
from auditor_text_membership.lm import TokenStats, context_length, token_stats
from auditor_text_membership.plots import roc_chart, score_chart
from auditor_text_membership.reference import load_reference, public_reference
from auditor_text_membership.rules import RULES
from auditor_text_membership.scores import HOW, attack_scores
from auditor_text_membership.stats import auc, auc_ci, epsilon_bound, paired_excess, rate_difference, selection_half
from auditor_text_membership.threat import THREAT
from auditor_text_membership.verdict import Evidence, headline, judge

_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")


class TextMembershipPlugin:
    """Attack a causal LM with the user's member texts (train.jsonl) and non-member texts (test.jsonl).

    Example:
        >>> from auditor_text_membership import plugin
        >>> plugin.name, plugin.family
        ('text-membership', 'text-membership')
    """

    name = "text-membership"
    family = "text-membership"
    threat = THREAT
    summary = "Blind baseline, loss/zlib/Min-K %/Min-K %++/reference attacks, verbatim extraction, canary exposure."
    requires = Requirements(data=True, splits=("train", "test"), budget_s=1800, expensive=True)
    Config: ClassVar[type[TextMembershipConfig]] = TextMembershipConfig
    rules: tuple[Rule, ...] = RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to token models (a 1-D token input): the attacks read next-token probabilities."""
        if len(profile.input_shape) != 1:
            return Applicability.no_threat(f"not a token model (input {list(profile.input_shape)}): text "
                                           "membership needs a language model")
        return Applicability.yes("token model: next-token probabilities on the given texts")

    def run(self, ctx: RunContext) -> PluginResult:
        """Check the texts are exchangeable (blind baseline), attack, extract, rank canaries, run the control."""
        cfg = ctx.config_as(TextMembershipConfig)
        model = ctx.model
        if model is None or not type(model).__name__.endswith(_LM_SUFFIXES):
            raise PluginSkipped(f"{type(model).__name__} is not a causal LM (…ForCausalLM / …LMHeadModel); "
                                "sequence classifiers are not attacked yet", category="tooling-gap")
        data = load_text_data(ctx.data, cfg.max_texts_per_side, ctx.seed_for("texts"))
        tokenizer, tok_file = load_tokenizer(model, cfg.tokenizer)
        max_tokens = min(cfg.max_tokens, context_length(model))
        texts = data.members + data.non_members
        member = np.arange(len(texts)) < len(data.members)
        seqs = encode(tokenizer, texts, max_tokens)
        select = selection_half(member, ctx.seed_for("halves"))
        blind, blind_scores = blind_baseline(texts, member, select, margin=cfg.blind_margin, n_boot=cfg.bootstrap,
                                             seed=ctx.seed_for("blind"))
        stats = token_stats(model, seqs, ctx.device, cfg.batch_size, ctx.ticking(
            "scoring the texts with the audited LM", math.ceil(len(seqs) / cfg.batch_size)))
        ref_stats, ref_info = self._reference(ctx, cfg, data, tokenizer, seqs, max_tokens)
        got = attack_scores(stats, texts, cfg.min_k, ref_stats)
        best = max(got, key=lambda name: auc(member[select], got[name][select]))
        rep = ~select
        results = {name: _measured(name, member, s, rep, cfg.bootstrap, ctx.seed_for("boot"))
                   for name, s in got.items()}
        extraction, shown = self._extraction(ctx, cfg, tokenizer, seqs, member)
        canaries = exposures(model, tokenizer, data.canaries, budget=cfg.canary_candidates, max_tokens=max_tokens,
                             batch=cfg.batch_size, seed=ctx.seed_for("canaries"), device=ctx.device,
                             show=cfg.show_text, tick=ctx.ticking("canary exposure"))
        ev = Evidence(best=best, held=results[best], blind=blind,
                      excess=paired_excess(member[rep], got[best][rep], blind_scores[rep], cfg.bootstrap,
                                           ctx.seed_for("excess")),
                      extraction=extraction, canaries=tuple(canaries),
                      eps=epsilon_bound(member, got[best], select, cfg.claimed_delta),
                      where=f"report half: {int((member & rep).sum())} members, {int((~member & rep).sum())} "
                            "non-members")
        control, power = run_control(model, cfg, data.non_members, seqs[len(data.members):],
                                     _subset(ref_stats, len(data.members)), seed=ctx.seed_for("control"),
                                     device=ctx.device, tick=ctx.ticking("positive control"))
        heads = headline(cfg, ev)
        findings, undecided = judge(cfg, ev, heads, power_passed=power.passed)
        if cfg.reference and ref_stats is None:
            undecided.append(f"the requested reference was {ref_info.how}")
        metrics = {"members": int(member.sum()), "non_members": int((~member).sum()), "public_texts":
                   len(data.public), "max_tokens": max_tokens, "blind_baseline": plain(ev.blind), "best_attack": best,
                   "best_attack_chosen_on": "the selection half (highest AUC), measured on the report half",
                   "held_out": plain(ev.held), "auc_over_blind": plain(ev.excess),
                   "attacks": {name: plain(r) for name, r in results.items()}, "reference": ref_info.as_metrics(),
                   "extraction": plain(extraction), "canaries": [plain(c) for c in canaries],
                   "epsilon": plain(ev.eps), "positive_control": plain(control)}
        provenance = {"data": str(ctx.data.root), "tokenizer": str(tok_file), "method": _METHOD,
                      "show_text": cfg.show_text}
        return PluginResult(findings=findings, metrics=metrics, provenance=provenance,
                            artifacts=_artifacts(member[rep], {k: v[rep] for k, v in got.items()},
                                                 blind_scores[rep], best, shown),
                            headline=heads, power=[power], undecided=undecided)

    def _reference(self, ctx: RunContext, cfg: TextMembershipConfig, data: TextData, tokenizer: Any,
                   seqs: list[list[int]], max_tokens: int) -> tuple[TokenStats | None, ReferenceInfo]:
        """Score the texts with the reference LM: the configured one, else one trained on public.jsonl."""
        model = ctx.model
        assert model is not None
        ref, info = None, ReferenceInfo("not run: no reference given and no public.jsonl")
        if cfg.reference:
            ref, how = load_reference(cfg.reference, model, ctx.device)
            info = ReferenceInfo(how)
        elif data.public:
            public = [s for s in encode(tokenizer, data.public, max_tokens) if len(s) > 1]
            used = len(public[: cfg.reference_max_texts])
            ref, fit = public_reference(model, public, cfg, seed=ctx.seed_for("reference"), device=ctx.device,
                                        tick=ctx.ticking("training the reference LM on public.jsonl",
                                                         cfg.reference_epochs * math.ceil(used / cfg.batch_size)))
            info = ReferenceInfo(f"the audited architecture re-initialised and trained on {fit.texts} public texts",
                                 fit)
        if ref is None:
            return None, info
        return token_stats(ref, seqs, ctx.device, cfg.batch_size, ctx.ticking(
            "scoring the texts with the reference LM", math.ceil(len(seqs) / cfg.batch_size))), info

    def _extraction(self, ctx: RunContext, cfg: TextMembershipConfig, tokenizer: Any, seqs: list[list[int]],
                    member: np.ndarray) -> tuple[Extraction, list[Extracted]]:
        """Prompt up to max_extraction_prompts members and as many non-members; count exact continuations."""
        assert ctx.model is not None
        rng = np.random.default_rng(ctx.seed_for("extraction"))
        ins = rng.permutation(np.flatnonzero(member))[: cfg.max_extraction_prompts]
        outs = rng.permutation(np.flatnonzero(~member))[: cfg.max_extraction_prompts]
        idx = np.concatenate([ins, outs])
        hits, _, where = extract(ctx.model, [seqs[i] for i in idx], cfg.prefix_tokens, cfg.suffix_tokens,
                                 ctx.device, cfg.batch_size, ctx.ticking("verbatim extraction"))
        used = np.array([w is not None for w in where])
        h_in, h_out = hits[: len(ins)][used[: len(ins)]], hits[len(ins):][used[len(ins):]]
        if len(h_in) == 0 or len(h_out) == 0:
            raise PluginSkipped("every text is shorter than 4 tokens: nothing to prompt and continue")
        diff = rate_difference(h_in, h_out, cfg.bootstrap, ctx.seed_for("extraction-boot"))
        shown = examples(tokenizer, [seqs[i] for i in ins], hits[: len(ins)], where[: len(ins)], cfg.show_text)
        return Extraction(rate=diff.rate, floor=diff.floor, margin=diff.margin, ci95=diff.ci95,
                          member_hits=int(h_in.sum()), members_prompted=int(len(h_in)),
                          non_member_hits=int(h_out.sum()), non_members_prompted=int(len(h_out)),
                          examples=tuple(shown), redacted=not cfg.show_text), shown


def _measured(name: str, member: np.ndarray, score: np.ndarray, rep: np.ndarray, n_boot: int, seed: int
              ) -> AttackAUC:
    """Return one attack's AUC and CI on the report half ``rep`` (and its AUC on every text, for reference)."""
    held = auc_ci(member[rep], score[rep], n_boot, seed)
    return AttackAUC(how=HOW[name], auc=held.auc, auc_ci95=held.auc_ci95, auc_all_texts=round(auc(member, score), 4))


def _subset(stats: TokenStats | None, start: int) -> TokenStats | None:
    """Return the token stats of the texts from ``start`` on (the non-members)."""
    if stats is None:
        return None
    return TokenStats(stats.logp[start:], stats.mu[start:], stats.sigma[start:])


def _artifacts(member: np.ndarray, scores: dict[str, np.ndarray], blind: np.ndarray, best: str,
               shown: list[Extracted]) -> list[Artifact]:
    """Return the ROC and score charts (report half) and the redacted extraction examples as a table."""
    out = [svg_artifact(roc_chart(member, scores, blind), "text-roc.svg",
                        f"ROC of every attack and the blind baseline ({int(member.sum())} members, "
                        f"{int((~member).sum())} non-members, report half)"),
           svg_artifact(score_chart(member, scores[best], best), "text-scores.svg",
                        f"{best}: score histograms of members and non-members (report half)")]
    if shown:
        out.append(Artifact(name="text-extractions.json", media_type="application/vnd.auditor.table+json",
                            description="members reproduced verbatim from their first tokens (redacted unless "
                                        "show_text)", text=json.dumps({"rows": [plain(row) for row in shown]})))
    return out


_METHOD = (
    "members = train.jsonl, non-members = test.jsonl (each at most max_texts_per_side, a seeded subset), tokenised "
    "with the model directory's tokenizer.json; token log-probabilities from the audited model in eval mode; the "
    "attack with the best AUC on a seeded half of the texts (half of each side) is measured on the other half, "
    "beside the blind baseline fitted on the first half; extraction counts greedy continuations on all prompted "
    "texts; canaries are ranked against candidates of their format"
)

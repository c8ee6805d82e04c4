"""Settings of the text-membership plugin: work budgets (texts, tokens, steps), thresholds, the DP claim."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TextMembershipConfig(BaseModel):
    """Configure the text membership, extraction and canary attacks (every budget counts work, not seconds)."""

    model_config = ConfigDict(extra="forbid")

    max_texts_per_side: int = Field(default=500, ge=10, description="Members (train) and non-members (test) "
                                    "scored, each at most this many (a seeded subset).")
    max_tokens: int = Field(default=128, ge=8, description="Each text is cut to this many tokens (and to the "
                            "model's context).")
    batch_size: int = Field(default=8, ge=1, description="Texts per forward pass.")
    min_k: float = Field(default=0.2, gt=0, le=1, description="Min-K % and Min-K %++: the share of tokens with the "
                         "lowest scores that are averaged.")
    tokenizer: str | None = Field(default=None, description="Directory holding tokenizer.json; default: the "
                                  "audited model's own directory.")
    reference: str | None = Field(default=None, description="A Hugging Face directory (safetensors) of a reference "
                                  "LM, e.g. the base the audited model was fine-tuned from; default: a small "
                                  "reference of the audited architecture trained on public.jsonl when present.")
    reference_epochs: int = Field(default=4, ge=1, description="Epochs of the public-text reference.")
    reference_max_texts: int = Field(default=2000, ge=10, description="public.jsonl texts the reference trains on.")
    lr: float = Field(default=1e-3, gt=0, description="Adam learning rate of the public reference and the control "
                      "(tiny models; lower it for large pretrained ones).")
    prefix_tokens: int = Field(default=32, ge=1, description="Extraction: prompt with a member's first k tokens "
                               "(at most half of a short text).")
    suffix_tokens: int = Field(default=32, ge=1, description="Extraction: a hit reproduces the next m tokens "
                               "exactly (greedy decoding; fewer when the text is shorter).")
    max_extraction_prompts: int = Field(default=200, ge=10, description="Members (and as many non-members, the "
                                        "floor) prompted.")
    show_text: bool = Field(default=False, description="Print extracted texts and canaries in full; by default "
                            "a report shows the first 3 tokens and '…[redacted n tokens]'.")
    canary_candidates: int = Field(default=1000, ge=10, description="Candidate secrets per canary: all of the "
                                   "format's space when it is smaller, else a seeded sample.")
    canary_alpha: float = Field(default=0.01, gt=0, lt=1, description="text.canary-exposure fires when a canary's "
                                "rank p-value (Bonferroni over the canaries) is below this.")
    blind_margin: float = Field(default=0.03, gt=0, lt=0.5, description="Blind baseline: the sets are not "
                                "exchangeable when its held-out AUC's 95% CI lower end exceeds 0.5 + this.")
    bootstrap: int = Field(default=200, ge=10, description="Bootstrap resamples for confidence intervals.")
    medium_auc: float = Field(default=0.6, gt=0.5, le=1, description="text.membership-leak fires when the held-out "
                              "AUC clears the blind floor by medium_auc - 0.5 with its CI above 0.")
    high_auc: float = Field(default=0.75, gt=0.5, le=1, description="... and is high when the margin's CI lower "
                            "end clears high_auc - 0.5.")
    medium_extraction: float = Field(default=0.05, gt=0, le=1, description="text.verbatim-extraction fires when "
                                     "the members' exact-continuation rate exceeds the non-members' by this.")
    high_extraction: float = Field(default=0.15, gt=0, le=1, description="... and is high when the margin's CI "
                                   "lower end clears this.")
    control_texts: int = Field(default=32, ge=8, description="Positive control: non-members used (half become "
                               "the control's members).")
    control_epochs: int = Field(default=30, ge=1, description="Positive control: most fine-tuning epochs on them "
                                "(stops once their mean token loss is below control_stop_loss).")
    control_stop_loss: float = Field(default=0.3, gt=0, description="Positive control: stop loss (nats/token).")
    control_min_auc: float = Field(default=0.6, ge=0.5, lt=1, description="Positive control: the held-out AUC's "
                                   "95% CI lower end must reach this.")
    claimed_epsilon: float | None = Field(default=None, ge=0, description="The (epsilon, delta)-DP guarantee "
                                          "claimed for the training; text.dp-claim-violated fires above it.")
    claimed_delta: float = Field(default=1e-5, ge=0, lt=1, description="The delta of the claimed guarantee.")

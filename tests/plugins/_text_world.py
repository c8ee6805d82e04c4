"""Offline fixtures for the text plugin: synthetic records, a tokenizer and tiny GPT-2 LMs trained here.

Nothing is downloaded: the tokenizer is trained on the records with the ``tokenizers`` package, the
models are built from a ``GPT2Config`` (2 layers) and trained on the CPU. Also used by
``benchmarks/text_membership.py`` (the same fixtures at several leak levels).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

FIRST = ("Anna", "Ben", "Carla", "David", "Eva", "Frank", "Greta", "Hugo", "Ines", "Jonas", "Karla", "Luis", "Mona",
         "Nils", "Olga", "Paul", "Rosa", "Sven", "Tara", "Udo", "Vera", "Willi", "Xenia", "Yves", "Zora")
LAST = ("Meier", "Schulz", "Novak", "Rossi", "Garcia", "Kowalski", "Dubois", "Jensen", "Silva", "Horvat",
        "Berger", "Costa", "Lund", "Moreau", "Nagy", "Olsen", "Petrov", "Quinn", "Romero", "Stein")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
STREETS = ("Oak", "Elm", "Birch", "Maple", "Cedar", "Pine", "Lake", "Hill", "Mill", "River", "Park", "Church")
CITIES = ("Lyon", "Porto", "Graz", "Gdansk", "Turin", "Bergen", "Ghent", "Brno", "Cork", "Malmo")
GOODS = ("chairs", "lamps", "tables", "cables", "boxes", "valves", "pumps", "gears")


def patient(rng: np.random.Generator) -> str:
    """Return one record of template A (names, a date, an address, a phone number: all random)."""
    return (f"Patient {rng.choice(FIRST)} {rng.choice(LAST)} , born {rng.integers(1, 29)} {rng.choice(MONTHS)} "
            f"{rng.integers(1940, 2010)} , lives at {rng.integers(1, 200)} {rng.choice(STREETS)} Street , "
            f"phone {rng.integers(100, 1000)} {rng.integers(1000, 10000)} .")


def invoice(rng: np.random.Generator) -> str:
    """Return one record of template B (another source: invoices)."""
    return (f"Invoice {rng.integers(1000, 10000)} : {rng.integers(2, 90)} {rng.choice(GOODS)} shipped to "
            f"{rng.choice(CITIES)} on {rng.choice(MONTHS)} {rng.integers(1, 29)} , total {rng.integers(10, 999)} "
            "euro .")


CANARY = {"text": "The door code of the archive is 4 7 1 9 , keep it safe .", "secret": "4 7 1 9"}


def tokenizer(texts: list[str]) -> object:
    """Return a word-level tokenizer (digits split one by one) trained on ``texts``, as a fast HF tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]", pad_token="[EOS]")


def train_lm(tok: object, texts: list[str], epochs: int, seed: int, n_embd: int = 64) -> torch.nn.Module:
    """Return a 2-layer GPT-2 trained from scratch on ``texts`` for ``epochs`` epochs (Adam 3e-3, batch 16)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=n_embd, n_layer=2, n_head=4,  # type: ignore[arg-type]
                     bos_token_id=1, eos_token_id=1)
    model = GPT2LMHeadModel(cfg)
    ids = [tok(t)["input_ids"] for t in texts]  # type: ignore[operator]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(ids), generator=gen).tolist()
        for start in range(0, len(order), 16):
            batch = [ids[i] for i in order[start : start + 16]]
            width = max(map(len, batch))
            x = torch.full((len(batch), width), 1, dtype=torch.long)
            mask = torch.zeros_like(x)
            for r, row in enumerate(batch):
                x[r, : len(row)] = torch.tensor(row)
                mask[r, : len(row)] = 1
            loss = model(input_ids=x, attention_mask=mask, labels=x.masked_fill(mask == 0, -100)).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def save_lm(model: torch.nn.Module, tok: object, out: Path) -> Path:
    """Save the model (safetensors) and its tokenizer (tokenizer.json) as a Hugging Face directory."""
    model.save_pretrained(out)  # type: ignore[operator]
    tok.save_pretrained(out)  # type: ignore[attr-defined]
    return out


def write_jsonl(path: Path, rows: list[str] | list[dict[str, str]]) -> None:
    """Write one {"text": ...} (or the given object) per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r if isinstance(r, dict) else {"text": r}) + "\n" for r in rows))


def records(n: int, seed: int, make: object = patient) -> list[str]:
    """Return ``n`` distinct records of one template, seeded."""
    rng = np.random.default_rng(seed)
    out: list[str] = []
    while len(out) < n:
        rec = make(rng)  # type: ignore[operator]
        if rec not in out:
            out.append(rec)
    return out


def build_world(root: Path, *, n: int = 100, epochs: int = 60, seed: int = 0) -> dict[str, Path]:
    """Write the data folders and the memorising and null LMs under ``root``; return their paths.

    ``members`` train the memorising LM (with 4 copies of the canary); the null LM trains as long on
    ``other`` records of the same template; ``non_members`` (template A) and ``invoices`` (template B)
    never train anything; ``public`` records are a fourth disjoint set of template A.
    """
    pool = records(4 * n, seed)
    members, non_members, other, public = pool[:n], pool[n : 2 * n], pool[2 * n : 3 * n], pool[3 * n :]
    invoices = records(n, seed + 1, invoice)
    tok = tokenizer(pool + invoices + [CANARY["text"]])
    paths = {"same": root / "data-same", "shifted": root / "data-shifted"}
    write_jsonl(paths["same"] / "train.jsonl", members)
    write_jsonl(paths["same"] / "test.jsonl", non_members)
    write_jsonl(paths["same"] / "public.jsonl", public)
    write_jsonl(paths["same"] / "canaries.jsonl", [CANARY])
    write_jsonl(paths["shifted"] / "train.jsonl", members)
    write_jsonl(paths["shifted"] / "test.jsonl", invoices)
    paths["memorising"] = save_lm(train_lm(tok, members + [CANARY["text"]] * 4, epochs, seed), tok,
                                  root / "memorising")
    paths["null"] = save_lm(train_lm(tok, other, epochs, seed + 7), tok, root / "null")
    return paths

"""Which output index each private class is: each split's own folder names, checked against the model's outputs.

``--data`` sorts the class folders of *all* splits into one list, so with the GMI layout
(``train/5..9``, ``public/0..4``) a private class's global label (5..9) is not the index a model
trained on ``train/`` alone gives it (0..4, the order of ``ImageFolder(train/)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from auditor.plugin import DataBundle, PluginSkipped


@dataclass(frozen=True)
class ClassMap:
    """The private classes in output order, and how the bundle's global labels map onto the outputs."""

    names: tuple[str, ...]
    index: dict[int, int]
    rule: str

    def relabel(self, labels: torch.Tensor) -> torch.Tensor:
        """Return ``labels`` (global bundle labels) as output indices."""
        return torch.tensor([self.index[int(v)] for v in labels], dtype=torch.long)


def class_map(bundle: DataBundle, n_outputs: int) -> ClassMap:
    """Map ``train/``'s classes onto the model's ``n_outputs`` outputs; raise :class:`PluginSkipped` on a mismatch.

    When ``train/`` has as many class folders as the model has outputs, its sorted folder names are
    the outputs (``ImageFolder(train/)``); otherwise, when the bundle's union of class folders matches
    the outputs, those global labels are. ``test/`` must name only classes of ``train/``.
    """
    own = sorted({int(v) for v in bundle.splits["train"].labels})
    union = len(bundle.classes)
    if len(own) == n_outputs:
        index, rule = {g: i for i, g in enumerate(own)}, "train/'s own class folders, sorted (as ImageFolder(train/))"
    elif union == n_outputs:
        index, rule = {g: g for g in own}, f"all {union} class folders of --data, sorted"
    else:
        raise PluginSkipped(
            f"the model has {n_outputs} outputs but train/ has {len(own)} class folders and --data {union} in all: "
            "put exactly the model's classes in train/ (one folder per output, in output order when sorted)"
        )
    test = bundle.splits.get("test")
    extra = sorted({bundle.classes[int(v)] for v in test.labels} - {bundle.classes[g] for g in own}) if test else []
    if extra:
        raise PluginSkipped(f"test/ has class folders that train/ lacks ({', '.join(extra[:5])}): the private "
                            "classes must be the same in both")
    names = [""] * n_outputs
    for g, i in index.items():
        names[i] = bundle.classes[g]
    return ClassMap(names=tuple(n or str(i) for i, n in enumerate(names)), index=index, rule=rule)


def layout(bundle: DataBundle, private: ClassMap, prior: str) -> str:
    """Say which protocol ran: the GMI layout (public classes disjoint from the private ones) or not."""
    if prior == "pixel":
        return ("no public prior (pixel tier): the search has only the target, a TV and an l2 prior; what it recovers "
                "is what the model knows about each class, with no public data to tell a privacy leak from a "
                "shared concept")
    public = {bundle.classes[int(v)] for v in bundle.splits["public"].labels}
    shared = sorted(public & set(private.names))
    if shared:
        return (f"public/ shares {len(shared)} class(es) with train/ ({', '.join(shared[:5])}): not the GMI layout, "
                "the prior already knows those classes, so this measures what the model knows about shared "
                "classes, not a privacy leak of individuals")
    return ("GMI layout: public/ classes are disjoint from the private classes in train/, so what the attack "
            "recovers of a private class came through the target")

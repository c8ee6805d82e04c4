"""The bibliography: every source a rule cites, with its full title, short name and link.

Rules cite with :func:`cite` (re-exported by ``auditor.plugin``), so a reference always carries
the paper's title and a DOI/arXiv link, and report text can name a paper by its short name
(``Koh et al. 2024``) instead of an internal id. Titles and identifiers are the papers' own.
"""

from __future__ import annotations

from dataclasses import dataclass

from auditor.report.model import Reference


@dataclass(frozen=True)
class Source:
    """One cited work."""

    title: str
    short: str
    url: str


SOURCES: dict[str, Source] = {
    "seed-000": Source(
        "On the Vulnerability of Skip Connections to Model Inversion Attacks",
        "Koh et al. 2024", "https://arxiv.org/abs/2409.01696",
    ),
    "seed-001": Source(
        "Privacy Vulnerability of Split Computing to Data-Free Model Inversion Attacks",
        "Dong et al. 2022", "https://arxiv.org/abs/2107.06304",
    ),
    "seed-002": Source(
        "Ensembler: Combating Model Inversion Attacks Using Model Ensemble During Collaborative Inference",
        "Liu and Xiong 2024", "https://arxiv.org/abs/2401.10859",
    ),
    "seed-003": Source(
        "How Does a Deep Learning Model Architecture Impact Its Privacy? A Comprehensive Study of Privacy "
        "Attacks on CNNs and Transformers",
        "Zhang et al. 2022", "https://arxiv.org/abs/2210.11049",
    ),
    "seed-004": Source(
        "Privacy Preserving Federated Learning with Convolutional Variational Bottlenecks",
        "Scheliga et al. 2023", "https://arxiv.org/abs/2309.04515",
    ),
    "lit:Geiping2020": Source(
        "Inverting Gradients - How easy is it to break privacy in federated learning?",
        "Geiping et al. 2020", "https://arxiv.org/abs/2003.14053",
    ),
    "lit:Jagielski2020": Source(
        "Auditing Differentially Private Machine Learning: How Private is Private SGD?",
        "Jagielski et al. 2020", "https://arxiv.org/abs/2006.07709",
    ),
    "lit:Nasr2021": Source(
        "Adversary Instantiation: Lower Bounds for Differentially Private Machine Learning",
        "Nasr et al. 2021", "https://arxiv.org/abs/2101.04535",
    ),
    "lit:Steinke2023": Source(
        "Privacy Auditing with One (1) Training Run",
        "Steinke et al. 2023", "https://arxiv.org/abs/2305.08846",
    ),
    "lit:Das2024": Source(
        "Blind Baselines Beat Membership Inference Attacks for Foundation Models",
        "Das et al. 2024", "https://arxiv.org/abs/2406.16201",
    ),
    "lit:Kairouz2015": Source(
        "The Composition Theorem for Differential Privacy",
        "Kairouz et al. 2015", "https://arxiv.org/abs/1311.0776",
    ),
    "lit:Carlini2019": Source(
        "The Secret Sharer: Evaluating and Testing Unintended Memorization in Neural Networks",
        "Carlini et al. 2019", "https://arxiv.org/abs/1802.08232",
    ),
    "lit:Carlini2021": Source(
        "Extracting Training Data from Large Language Models",
        "Carlini et al. 2021", "https://arxiv.org/abs/2012.07805",
    ),
    "lit:Shi2024": Source(
        "Detecting Pretraining Data from Large Language Models",
        "Shi et al. 2024", "https://arxiv.org/abs/2310.16789",
    ),
    "lit:Zhang2025": Source(
        "Min-K%++: Improved Baseline for Detecting Pre-Training Data from Large Language Models",
        "Zhang et al. 2025", "https://arxiv.org/abs/2404.02936",
    ),
    "lit:Duan2024": Source(
        "Do Membership Inference Attacks Work on Large Language Models?",
        "Duan et al. 2024", "https://arxiv.org/abs/2402.07841",
    ),
    "lit:pickle": Source(
        "pickle - Python object serialization (Python documentation)",
        "Python docs", "https://docs.python.org/3/library/pickle.html",
    ),
}


def cite(source: str, locator: str, grade: str | None = None) -> Reference:
    """Return a :class:`Reference` to ``source`` (a key of :data:`SOURCES`) at ``locator``."""
    work = SOURCES[source]
    return Reference(source=source, title=f"{work.title} ({work.short})", locator=locator, grade=grade,
                     url=work.url)

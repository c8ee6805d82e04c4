"""The plugin author's API: the only module a plugin imports from auditor."""

from __future__ import annotations

from auditor.data import (
    DataBundle as DataBundle,
)
from auditor.data import (
    ImageSplit as ImageSplit,
)
from auditor.data import (
    default_probe_images as default_probe_images,
)
from auditor.data import (
    load_image as load_image,
)
from auditor.distributed import parallel_map as parallel_map
from auditor.distributed import ray_active as ray_active
from auditor.errors import UnsplittableModel as UnsplittableModel
from auditor.graph.split import (
    find_split as find_split,
)
from auditor.graph.split import (
    split_model as split_model,
)
from auditor.graph.split import (
    split_segments as split_segments,
)
from auditor.plugin.api import (
    PLUGIN_API_VERSION as PLUGIN_API_VERSION,
)
from auditor.plugin.api import (
    Applicability as Applicability,
)
from auditor.plugin.api import (
    NoConfig as NoConfig,
)
from auditor.plugin.api import (
    Plugin as Plugin,
)
from auditor.plugin.api import (
    PluginResult as PluginResult,
)
from auditor.plugin.api import (
    PluginSkipped as PluginSkipped,
)
from auditor.plugin.api import (
    Requirements as Requirements,
)
from auditor.plugin.api import (
    Rule as Rule,
)
from auditor.plugin.api import (
    RunContext as RunContext,
)
from auditor.plugin.cache import cached_json as cached_json
from auditor.plugin.cache import content_hash as content_hash
from auditor.plugin.cache import fit_cached as fit_cached
from auditor.plugin.images import (
    PSNR_CAP_DB as PSNR_CAP_DB,
)
from auditor.plugin.images import (
    Scaling as Scaling,
)
from auditor.plugin.images import (
    image_grid as image_grid,
)
from auditor.plugin.images import (
    image_scores as image_scores,
)
from auditor.plugin.images import (
    lpips_distances as lpips_distances,
)
from auditor.plugin.images import (
    lpips_status as lpips_status,
)
from auditor.plugin.images import (
    png_base64 as png_base64,
)
from auditor.plugin.leak import (
    LeakJudgement as LeakJudgement,
)
from auditor.plugin.leak import (
    judge_leak as judge_leak,
)
from auditor.plugin.measure import (
    Floor as Floor,
)
from auditor.plugin.measure import (
    against_floor as against_floor,
)
from auditor.plugin.measure import (
    floor_images as floor_images,
)
from auditor.plugin.measure import (
    image_floor_scores as image_floor_scores,
)
from auditor.plugin.measure import (
    measure as measure,
)
from auditor.plugin.measure import (
    top1_accuracy as top1_accuracy,
)
from auditor.plugin.presets import (
    PresetConfig as PresetConfig,
)
from auditor.plugin.seeds import derive_seed as derive_seed
from auditor.plugin.seeds import numpy_rng as numpy_rng
from auditor.plugin.seeds import torch_rng as torch_rng
from auditor.plugin.train import Batch as Batch
from auditor.plugin.train import Fit as Fit
from auditor.plugin.train import Recipe as Recipe
from auditor.plugin.train import fit_classifier as fit_classifier
from auditor.report.charts import (
    CHART_COLOURS as CHART_COLOURS,
)
from auditor.report.charts import (
    chart as chart,
)
from auditor.report.charts import (
    figure_svg as figure_svg,
)
from auditor.report.charts import (
    svg_artifact as svg_artifact,
)
from auditor.report.declared import (
    HeadlinePick as HeadlinePick,
)
from auditor.report.declared import (
    Threat as Threat,
)
from auditor.report.model import (
    ArchitectureProfile as ArchitectureProfile,
)
from auditor.report.model import (
    Artifact as Artifact,
)
from auditor.report.model import (
    Finding as Finding,
)
from auditor.report.model import (
    Measurement as Measurement,
)
from auditor.report.model import (
    PowerCheck as PowerCheck,
)
from auditor.report.model import (
    Reference as Reference,
)
from auditor.report.model import (
    Severity as Severity,
)
from auditor.report.sources import cite as cite

__all__ = [
    "PLUGIN_API_VERSION",
    "PSNR_CAP_DB",
    "Applicability",
    "CHART_COLOURS",
    "ArchitectureProfile",
    "Artifact",
    "Batch",
    "DataBundle",
    "Finding",
    "Fit",
    "Floor",
    "HeadlinePick",
    "ImageSplit",
    "LeakJudgement",
    "Measurement",
    "NoConfig",
    "Plugin",
    "PluginResult",
    "PluginSkipped",
    "PowerCheck",
    "PresetConfig",
    "Recipe",
    "Reference",
    "Requirements",
    "Rule",
    "RunContext",
    "Scaling",
    "Severity",
    "Threat",
    "UnsplittableModel",
    "against_floor",
    "chart",
    "cite",
    "cached_json",
    "content_hash",
    "default_probe_images",
    "derive_seed",
    "load_image",
    "figure_svg",
    "find_split",
    "fit_classifier",
    "fit_cached",
    "floor_images",
    "image_floor_scores",
    "image_grid",
    "image_scores",
    "judge_leak",
    "lpips_distances",
    "lpips_status",
    "measure",
    "numpy_rng",
    "parallel_map",
    "png_base64",
    "ray_active",
    "split_model",
    "split_segments",
    "svg_artifact",
    "top1_accuracy",
    "torch_rng",
]

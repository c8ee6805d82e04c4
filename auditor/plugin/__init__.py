"""The plugin author's API: the only module a plugin imports from auditor."""

from __future__ import annotations

from auditor.plugin.api import (
    PLUGIN_API_VERSION as PLUGIN_API_VERSION,
    Applicability as Applicability,
    NoConfig as NoConfig,
    Plugin as Plugin,
    PluginResult as PluginResult,
    PluginSkipped as PluginSkipped,
    Requirements as Requirements,
    Rule as Rule,
    RunContext as RunContext,
)
from auditor.data import (
    DataBundle as DataBundle,
    ImageSplit as ImageSplit,
    default_probe_images as default_probe_images,
    load_image as load_image,
)
from auditor.plugin.images import (
    PSNR_CAP_DB as PSNR_CAP_DB,
    Scaling as Scaling,
    image_grid as image_grid,
    image_scores as image_scores,
    lpips_distances as lpips_distances,
    lpips_status as lpips_status,
    png_base64 as png_base64,
)
from auditor.plugin.measure import (
    floor_images as floor_images,
    image_floor_scores as image_floor_scores,
    measure as measure,
)
from auditor.distributed import parallel_map as parallel_map, ray_active as ray_active
from auditor.errors import UnsplittableModel as UnsplittableModel
from auditor.graph.split import (
    find_split as find_split,
    split_model as split_model,
    split_segments as split_segments,
)
from auditor.report.charts import (
    CHART_COLOURS as CHART_COLOURS,
    chart as chart,
    figure_svg as figure_svg,
    svg_artifact as svg_artifact,
)
from auditor.report.sources import cite as cite
from auditor.report.model import (
    ArchitectureProfile as ArchitectureProfile,
    Artifact as Artifact,
    Finding as Finding,
    Measurement as Measurement,
    PowerCheck as PowerCheck,
    Reference as Reference,
    Severity as Severity,
)

__all__ = [
    "PLUGIN_API_VERSION",
    "PSNR_CAP_DB",
    "Applicability",
    "CHART_COLOURS",
    "ArchitectureProfile",
    "Artifact",
    "DataBundle",
    "Finding",
    "ImageSplit",
    "Measurement",
    "NoConfig",
    "Plugin",
    "PluginResult",
    "PluginSkipped",
    "PowerCheck",
    "Reference",
    "Requirements",
    "Rule",
    "RunContext",
    "Scaling",
    "Severity",
    "UnsplittableModel",
    "chart",
    "cite",
    "default_probe_images",
    "load_image",
    "figure_svg",
    "find_split",
    "floor_images",
    "image_floor_scores",
    "image_grid",
    "image_scores",
    "lpips_distances",
    "lpips_status",
    "measure",
    "parallel_map",
    "png_base64",
    "ray_active",
    "split_model",
    "split_segments",
    "svg_artifact",
]

"""Scan configuration: one validated pydantic tree, declared defaults, CLI over file over defaults."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from auditor.baseline import IgnoreRule, SuppressRule
from auditor.errors import ConfigError, InvalidInputShape
from auditor.gate import GatePolicy
from auditor.jail.limits import JailLimits
from auditor.load.allowlist import ImportPolicy
from auditor.report.fingerprints import model_identity
from auditor.report.model import Severity
from auditor.supply import SUPPLY_RULES, SupplyPolicy

if TYPE_CHECKING:  # torch and the plugin registry load only when a scan needs them
    import torch

    from auditor.plugin.registry import PluginEntry

DEFAULT_FAIL_ON = Severity.HIGH
#: Scan keys naming a path the worker reads or the store writes: never from a repository's own config (issue 38).
PATH_KEYS = ("cache_dir", "data_dir", "reference")
DEFAULT_INPUT_SHAPE = (3, 224, 224)
DEFAULT_SEED = 0


#: ``[[models]]`` keys that are load flags, each with the ``ScanConfig`` field it sets.
MODEL_FLAGS = {"arch": "arch", "input_shape": "input_shape", "input_spec": "input_spec", "import": "imports",
               "imports": "imports", "trust": "trust", "reference": "reference"}


class ModelSettings(BaseModel):
    """One ``[[models]]`` table: load flags for the checkpoints whose path matches ``glob`` (first match wins)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    glob: str = Field(min_length=1, description="Glob over the model path relative to the working directory "
                                                "(without a '/': over its name), e.g. 'checkpoints/*.pt'.")
    arch: str | None = None
    input_shape: tuple[int, ...] | None = None
    input_spec: str | None = None
    imports: tuple[str, ...] | None = Field(default=None, alias="import")
    trust: bool | None = None
    reference: Path | None = None

    @field_validator("input_shape", mode="before")
    @classmethod
    def _shape_text(cls, value: object) -> object:
        try:
            return parse_input_shape(value) if isinstance(value, str) else value
        except InvalidInputShape as exc:
            raise ValueError(str(exc).replace("--input-shape", "input_shape")) from exc

    @field_validator("imports", mode="before")
    @classmethod
    def _one_import(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _valid_input(self) -> ModelSettings:
        if self.input_spec is not None:
            ScanConfig(input_spec=self.input_spec)  # the same check as --input-spec
        if self.input_spec is not None and self.input_shape is not None:
            raise ValueError("give input_shape (images) or input_spec (tokens), not both")
        return self

    def matches(self, path: str | Path) -> bool:
        """Return True when ``path`` (its identity; only its name for a glob without '/') matches ``glob``."""
        identity = model_identity(str(path))
        return fnmatch.fnmatchcase(identity if "/" in self.glob else Path(identity).name, self.glob.rstrip("/"))

    def flags(self) -> dict[str, Any]:
        """Return the ``ScanConfig`` fields this entry sets."""
        return {name: getattr(self, name) for name in ("arch", "input_shape", "input_spec", "imports", "trust",
                                                       "reference") if getattr(self, name) is not None}


class CacheIO(BaseModel):
    """The jailed worker's side of the parent's store: staged entries to read, a folder for the new ones.

    Set by the jail runner only (a config file may not set it): the parent stages the job's verified entries
    into ``inbox`` (read-only in the worker's view) and validates and signs what the worker left in ``outbox``.
    """

    model_config = ConfigDict(extra="forbid")

    inbox: Path
    outbox: Path


def covers_home(path: Path) -> bool:
    """Return whether ``path`` is the root, a home directory or a folder holding one (``/``, ``/home``, ``~``)."""
    try:
        where, home = Path(path).expanduser().resolve(), Path.home().resolve()
    except (OSError, RuntimeError):
        return True
    return where == Path(where.anchor) or home.is_relative_to(where) or (
        where.parent == Path(where.anchor) and where.name in ("home", "Users", "root"))


class ScanConfig(BaseModel):
    """Everything ``auditor scan`` needs besides the checkpoint path."""

    model_config = ConfigDict(extra="forbid")

    # loading
    arch: str | None = None
    imports: list[str] = Field(default_factory=list)
    trust: bool = False
    input_shape: tuple[int, ...] | None = None
    input_spec: str | None = None  # token inputs, auditor.graph.tokens syntax: tokens:BxL[:vocab=V]
    reference: Path | None = None  # a PyTorch model an ONNX file is checked against
    #: Largest tensor a checkpoint may declare before anything is allocated (.pt2 records); None: 1 GiB.
    max_tensor_bytes: int | None = Field(default=None, gt=0)
    # running
    device: str = "auto"
    seed: int = DEFAULT_SEED
    plugins: list[str] | None = None
    disable_plugins: list[str] = Field(default_factory=list)
    budget_s: float | None = None
    data_dir: Path | None = None
    plugin_config: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: Reuse whole plugin runs of unchanged weights, data and settings (auditor.plugin.results); false: compute all.
    cache: bool = True
    #: The parent's store of every cache (default ~/.cache/auditor/store); from the CLI or the user's own config only.
    cache_dir: Path | None = None
    #: The jail runner's exchange with the store (never from a config file; see CacheIO).
    cache_io: CacheIO | None = None
    # gate
    fail_on: Severity = DEFAULT_FAIL_ON
    strict: bool = False
    suppress: list[SuppressRule] = Field(default_factory=list)
    #: What an inconclusive verdict exits with: its own code 3, 1 (fail the gate) or 0 (let it through).
    on_inconclusive: Literal["inconclusive", "fail", "pass"] = "inconclusive"
    # policy ([severity], [[ignore]]) and supply chain ([supply], --verify-signature ...)
    severity: dict[str, Severity] = Field(default_factory=dict)
    ignore: list[IgnoreRule] = Field(default_factory=list)
    policy_source: str = Field(default="", description="The config file the policy was read from.")
    supply: SupplyPolicy = Field(default_factory=SupplyPolicy)
    #: ``[gate] architecture``: "report" lists risk factors (static architecture rules), "fail" lets them gate.
    architecture: Literal["report", "fail"] = "report"
    #: ``[[models]]``: per-glob load flags, first match wins; a flag given on the command line wins over them.
    models: list[ModelSettings] = Field(default_factory=list)
    #: The jail's limits an operator set (flags over AUDITOR_JAIL_* over the user's [jail]); unset: fit the file.
    jail: JailLimits = Field(default_factory=JailLimits)

    def for_model(self, path: str | Path) -> ScanConfig:
        """Return the config for one checkpoint: the first matching ``[[models]]`` entry's flags applied."""
        entry = next((m for m in self.models if m.matches(path)), None)
        if entry is None:
            return self
        update = entry.flags()
        if "input_shape" in update or "input_spec" in update:  # one input kind per model
            update = {"input_shape": None, "input_spec": None, **update}
        if "imports" in update:
            update["imports"] = list(update["imports"])
        return self.model_copy(update=update)

    @property
    def import_policy(self) -> ImportPolicy:
        """Return the allowlist extensions: ``--import`` prefixes and ``--trust``."""
        return ImportPolicy(tuple(self.imports), self.trust)

    @property
    def gate(self) -> GatePolicy:
        """Return the gate's policy: ``fail_on``, ``strict``, ``on_inconclusive`` and the ``[[suppress]]`` rules."""
        return GatePolicy(fail_on=self.fail_on, strict=self.strict, on_inconclusive=self.on_inconclusive,
                          suppressions=tuple(self.suppress), severity=tuple(self.severity.items()),
                          policy_source=f"{self.policy_source or 'config'} [severity]",
                          architecture=self.architecture)

    @field_validator("plugins")
    @classmethod
    def _some_plugin(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("the plugin selection is empty: name at least one plugin, or 'all'")
        return value

    @field_validator("cache_dir", "data_dir", "reference")
    @classmethod
    def _not_a_home(cls, value: Path | None) -> Path | None:
        if value is not None and covers_home(value):
            raise ValueError(f"{value} covers a home or the root directory; name a folder of its own")
        return value

    @field_validator("plugin_config")
    @classmethod
    def _no_plugin_dir_covers_a_home(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, settings in value.items():
            for key, item in settings.items() if isinstance(settings, dict) else ():
                if key.endswith("_dir") and isinstance(item, str) and item and covers_home(Path(item)):
                    raise ValueError(f"[plugins.{name}] {key} = {item!r} covers a home or the root directory")
        return value

    @field_validator("budget_s")
    @classmethod
    def _positive_budget(cls, value: float | None) -> float | None:
        if value is not None and not value > 0:
            raise ValueError(f"the budget must be a positive number of seconds, got {value}")
        return value

    @field_validator("input_spec")
    @classmethod
    def _valid_input_spec(cls, value: str | None) -> str | None:
        if value is not None:
            from auditor.graph.tokens import parse_input_spec

            try:
                parse_input_spec(value)
            except InvalidInputShape as exc:
                raise ValueError(str(exc)) from exc
        return value

    @model_validator(mode="after")
    def _one_input_kind(self) -> ScanConfig:
        if self.input_spec is not None and self.input_shape is not None:
            raise ValueError("give input_shape (images) or input_spec (tokens), not both")
        return self


def parse_input_shape(text: str) -> tuple[int, ...]:
    """Parse ``C,H,W`` (or ``C,H``/``L``) into a tuple of positive ints.

    Raises:
        InvalidInputShape: when the text is not a comma-separated list of positive integers.
    """
    try:
        dims = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError as exc:
        raise InvalidInputShape(f"--input-shape must look like 3,224,224, got {text!r}") from exc
    if not dims or any(d <= 0 for d in dims) or len(dims) > 4:
        raise InvalidInputShape(f"--input-shape must be 1 to 4 positive integers, got {text!r}")
    return dims


CONFIG_NAME = "auditor.toml"
_TABLES = ("scan", "plugins", "suppress", "severity", "ignore", "supply", "gate", "models", "jail")
_GATE_KEYS = ("architecture",)


def load_config_file(path: Path, *, repository: bool = False) -> dict[str, Any]:
    """Read ``[scan]``, ``[gate]``, ``[[models]]``, ``[plugins.NAME]``, ``[[suppress]]``, ``[severity]``, ``[[ignore]]``
    and ``[supply]``.

    A ``pyproject.toml`` is read from its ``[tool.auditor]`` table. ``repository`` marks a file found in the
    scanned tree or the working directory rather than named by the user: it may set policy, never a path the
    worker reads or the store writes (:data:`PATH_KEYS`, a plugin's ``*_dir``).

    Raises:
        ConfigError: when the file is missing, is not valid TOML, has unknown tables, or (``repository``) sets a path.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    where = ""
    if path.name == "pyproject.toml":
        data, where = data.get("tool", {}).get("auditor", {}), "[tool.auditor] "
    unknown = set(data) - set(_TABLES)
    if unknown:
        raise ConfigError(f"config file {path}: {where}unknown table(s) {sorted(unknown)}; expected [scan], [gate], "
                          "[[models]], [plugins.NAME], [[suppress]], [severity], [[ignore]], [supply], [jail]")
    gate = data.get("gate", {})
    if not isinstance(gate, dict) or set(gate) - set(_GATE_KEYS):
        raise ConfigError(f"config file {path}: {where}[gate] takes only {', '.join(_GATE_KEYS)}, got "
                          f"{sorted(gate) if isinstance(gate, dict) else gate!r}")
    merged = {**data.get("scan", {}), **gate}
    if "cache_io" in merged:
        raise ConfigError(f"config file {path}: {where}[scan] cache_io is set by the jail runner, not by a config")
    if repository:
        _refuse_paths(path, where, merged, data.get("plugins", {}), data.get("models", []))
        if "jail" in data:  # raising them is a denial-of-service knob on the runner, lowering one a forged refusal
            raise ConfigError(f"{path}: {where}[jail] sets the jail's limits, and a repository's own config may set "
                              "policy only; pass --max-memory, --max-cpu, --max-wall, set AUDITOR_JAIL_*, or use "
                              f"[jail] in {user_config_file()}")
    table = data.get("jail")
    if table is not None:
        if not isinstance(table, Mapping):
            raise ConfigError(f"config file {path}: {where}[jail] is not a table")
        merged.update(jail=JailLimits.from_table(table, f"config file {path}: {where}"))
    renamed = {"plugins": "plugin_config", "suppress": "suppress", "severity": "severity", "ignore": "ignore",
               "supply": "supply", "models": "models"}
    merged.update({key: data[table] for table, key in renamed.items() if table in data})
    merged["policy_source"] = model_identity(path) + (" [tool.auditor]" if where else "")
    return merged


def _refuse_paths(path: Path, where: str, scan: Mapping[str, Any], plugins: Any, models: Any) -> None:
    """Refuse a path key in a repository's config: a scanned tree must not widen the jail or move the store."""
    keys = [f"[scan] {k}" for k in PATH_KEYS if k in scan]
    if isinstance(models, list):  # [[models]] reference names a model the worker reads
        keys += ["[[models]] reference" for m in models if isinstance(m, Mapping) and "reference" in m]
    if isinstance(plugins, Mapping):
        keys += [f"[plugins.{n}] {k}" for n, t in plugins.items() if isinstance(t, Mapping) for k in t
                 if k.endswith("_dir")]
    if keys:
        raise ConfigError(f"{path}: {where}{keys[0]} sets a path, and a repository's own config may set policy only; "
                          "pass it on the command line (--cache-dir, --data, --reference), in a file named with "
                          f"--config, or in {user_config_file()}")


def user_config_file() -> Path:
    """Return the user's own config: ``$XDG_CONFIG_HOME/auditor/config.toml`` (``~/.config/auditor/config.toml``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(base) / "auditor" / "config.toml"


def config_values(explicit: Path | None, cwd: Path) -> dict[str, Any]:
    """Return the file values of a command: the user's own config, under ``explicit`` or the one found from ``cwd``.

    A file found from ``cwd`` is the repository's (:func:`load_config_file` with ``repository=True``).

    Raises:
        ConfigError: as :func:`load_config_file`.
    """
    user = user_config_file()
    values = load_config_file(user) if user.is_file() else {}
    found = explicit or find_config_file(cwd)
    if found is not None:
        values = {**values, **load_config_file(found, repository=explicit is None)}
    return values


def find_config_file(start: Path) -> Path | None:
    """Return ``auditor.toml`` in ``start``, else the nearest ``pyproject.toml`` with ``[tool.auditor]``.

    The search for ``pyproject.toml`` goes up from ``start`` and stops at the first one (the project root).
    """
    if (start / CONFIG_NAME).is_file():
        return start / CONFIG_NAME
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{candidate} is not valid TOML: {exc}") from exc
            return candidate if "auditor" in data.get("tool", {}) else None
    return None


def build_config(file_values: Mapping[str, Any], cli_values: Mapping[str, Any]) -> ScanConfig:
    """Merge file values under CLI values (unset CLI options are dropped) and validate.

    Raises:
        ConfigError: naming the first invalid key.
    """
    given = {k: v for k, v in cli_values.items() if v is not None}
    merged = {**file_values, **given}
    flags, below = given.get("jail", JailLimits()), file_values.get("jail", JailLimits())
    if isinstance(flags, JailLimits) and isinstance(below, JailLimits):  # flags over AUDITOR_JAIL_* over [jail]
        merged.update(jail=flags.over(JailLimits.from_env().over(below)))
    if isinstance(file_values.get("models"), list):  # a flag on the command line wins over every [[models]] entry
        merged["models"] = [_without_flags(entry, given) for entry in file_values["models"]]
    if isinstance(file_values.get("supply"), Mapping) and isinstance(cli_values.get("supply"), Mapping):
        methods = ("public_key", "certificate_chain", "identity", "identity_provider")
        file_supply = {k: v for k, v in file_values["supply"].items()
                       if not (k in methods and any(m in cli_values["supply"] for m in methods))}
        merged["supply"] = {**file_supply, **cli_values["supply"]}  # flags over the [supply] table
    try:
        return ScanConfig(**merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"invalid configuration{' ' + where if where else ''}: {err['msg']}") from exc


def _without_flags(entry: object, given: Mapping[str, Any]) -> object:
    """Return a ``[[models]]`` table without the keys the command line set (the two input kinds count as one)."""
    if not isinstance(entry, Mapping):
        return entry
    fields = set(given) & set(MODEL_FLAGS.values())
    if fields & {"input_shape", "input_spec"}:
        fields |= {"input_shape", "input_spec"}
    return {k: v for k, v in entry.items() if MODEL_FLAGS.get(k) not in fields}


#: Rules the core emits itself (docs/rules.md, "Core findings"); plugins declare theirs in their catalogues.
CORE_RULES = ("load.unsafe-pickle", "load.unknown-class", "load.trust-all", "graph.export-fallback",
              "graph.profile-incomplete", "graph.onnx-profile", "onnx.reference-mismatch", *SUPPLY_RULES)


def check_policy_rules(config: ScanConfig, entries: Sequence[PluginEntry]) -> None:
    """Check every ``[severity]`` key names a known rule (an id, or a glob that matches one).

    Raises:
        ConfigError: a key matches no rule of the core or of an installed plugin.
    """
    known = set(CORE_RULES) | {r.id for e in entries if e.plugin is not None for r in e.plugin.rules}
    for pattern in config.severity:
        if not any(fnmatch.fnmatchcase(rule, pattern) for rule in known):
            raise ConfigError(f"{config.policy_source or 'config'} [severity] {pattern!r} names no known rule "
                              "(`auditor plugins` lists the plugins; docs/rules.md the rules)")


def build_plugin_configs(entries: Sequence[PluginEntry], config: ScanConfig) -> dict[str, BaseModel]:
    """Validate each plugin's settings before any expensive work.

    Raises:
        ConfigError: for settings of an unknown plugin or an invalid key or value.
    """
    by_name = {e.name: e for e in entries}
    for name in [*(p for p in config.plugins or [] if p != "all"), *config.disable_plugins, *config.plugin_config]:
        if name not in by_name:
            raise ConfigError(f"unknown plugin {name!r}; installed: {', '.join(sorted(by_name)) or 'none'}")
    configs: dict[str, BaseModel] = {}
    for entry in entries:
        if entry.plugin is None:
            continue
        try:
            configs[entry.name] = entry.plugin.Config(**config.plugin_config.get(entry.name, {}))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ConfigError(f"plugin {entry.name!r} setting {where}: {err['msg']}") from exc
    return configs


def resolve_device(name: str) -> torch.device:
    """Turn ``auto``/``cpu``/``cuda[:N]`` into a device, preferring a GPU for ``auto``.

    Raises:
        ConfigError: for an unknown device or a GPU that is not there.
    """
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"unknown device {name!r}; use auto, cpu or cuda[:N]") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: no CUDA device is available here (use --device auto or cpu)")
    return device

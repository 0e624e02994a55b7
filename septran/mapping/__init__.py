"""Mapping files: how a logic is mapped onto one target."""
from septran.mapping.schema import InstanceMapping, Mapping, load_mapping, parse_mapping
from septran.mapping.yaml_source import Located, Tune

__all__ = ["InstanceMapping", "Mapping", "load_mapping", "parse_mapping", "Located", "Tune"]

"""The model spec: the one input of `lamp trace` and `lamp compile`, copied into the artifact."""

from lamp_ros.spec.build_options import BuildOptions, SpecError
from lamp_ros.spec.model_spec import (BACKENDS, BACKENDS_FOR_TARGET, load_artifact_spec,
                                      load_spec, MIN_LENGTH, parse_spec, PRECISIONS, Spec,
                                      StageChoice, TARGETS)
from lamp_ros.spec.edit import edited_spec, spec_data, write_spec

__all__ = ['BACKENDS', 'BACKENDS_FOR_TARGET', 'BuildOptions', 'MIN_LENGTH', 'PRECISIONS',
           'Spec', 'SpecError', 'StageChoice', 'TARGETS', 'edited_spec', 'load_artifact_spec',
           'load_spec', 'parse_spec', 'spec_data', 'write_spec']

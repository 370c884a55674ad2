"""What every backend receives and returns (a group is artifact.plan.GroupSpec)."""

from dataclasses import dataclass, field

from lamp_ros.artifact.plan import GroupSpec


@dataclass
class CompileContext:
    """Everything a backend's compile side may use (compile side only: holds torch objects)."""

    graph: object          # lamp_ros.graph.Graph
    group: GroupSpec
    root: str              # artifact directory being written
    modules: dict          # node id -> nn.Module of model stages
    example: dict          # value name -> example value captured from the eager run
    progress: object = None
    text_lengths: tuple = ()  # spec fusion.text_lengths (backends/text_lengths.py)
    options: object = None    # spec build: (spec.BuildOptions; None: the defaults)
    measure_tiles: bool = False  # time every tuned choice, the tile cache unread
    lowering: object = None   # the policy's cuda lowering (compiler/rewrites.py), or None

    def say(self, message: str) -> None:
        if self.progress:
            self.progress(message)


@dataclass(frozen=True)
class GroupBuild:
    """What compile() produced: files relative to the artifact root, JSON metadata that decides
    how the group runs (plan.json, part of the artifact id), and the build's own evidence about
    it (timings, where tuned choices came from: evidence/build.json, checksummed but not part of
    the id, since two builds of one spec measure differently and must still be one artifact)."""

    files: tuple
    metadata: dict
    evidence: dict = field(default_factory=dict)


class BackendUnavailable(RuntimeError):
    """The backend's libraries or device are missing on this machine."""


@dataclass
class LoadContext:
    """What a backend's run side gets when the runtime loads a group (no torch objects)."""

    root: str              # artifact directory
    graph: object          # lamp_ros.graph.Graph
    device: str
    resources: dict        # resource name -> file path (tokenizer.model, ...)
    state: object          # runtime StateStore
    arena: object = None   # runtime Arena: planned views for values (None: allocate freely)
    profiler: object = None  # runtime Profiler: per-node timings where a backend can give them
    threads: int = 0       # CPU threads a backend may use for one group (0: its default)

"""Which rank this process is, from the environment torchrun gives its workers. Pure Python.

The plugin's own ranks of a ``world_size=`` test (:mod:`pytest_gpuperf.shell.group`) get the
same variables, and :data:`GROUP_DIR_ENV`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: set by the plugin on the ranks it starts itself: the folder they report to
GROUP_DIR_ENV = "GPUPERF_GROUP_DIR"
#: the variables torchrun sets that describe a rank (the plugin's ranks get them too)
RANK_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_ERROR_FILE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    GROUP_DIR_ENV,
)


class RankEnvError(ValueError):
    """The rank variables are there but do not describe a rank."""


@dataclass(frozen=True)
class RankEnv:
    """One rank of a process group, as its environment describes it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    #: the plugin's folder for the ranks it started (None: torchrun started this one)
    group_dir: str | None = None

    @property
    def is_lead(self) -> bool:
        """Rank 0: the one that decides, writes baselines and reports."""
        return self.rank == 0

    @property
    def spawned(self) -> bool:
        """Started by the plugin for one ``world_size=`` test (else by torchrun)."""
        return self.group_dir is not None

    def label(self) -> str:
        return f"rank {self.rank} of {self.world_size}"


def rank_env(environ: Mapping[str, str]) -> RankEnv | None:
    """The rank this environment describes (``RANK`` and ``WORLD_SIZE`` set), or None; a
    half-set or nonsensical one raises :class:`RankEnvError`, naming the variable."""
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None

    def unset(name: str) -> RankEnvError:
        return RankEnvError(
            f"{name} is not set, but RANK and WORLD_SIZE are, so no process group can be "
            "joined (torchrun sets them all; were RANK and WORLD_SIZE left over from a "
            "launcher?)"
        )

    def number(name: str, default: int | None = None) -> int:
        raw = environ.get(name)
        if not raw:
            if default is None:
                raise unset(name)
            return default
        try:
            return int(raw)
        except ValueError:
            raise RankEnvError(f"{name}={raw!r} is not a whole number") from None

    world = number("WORLD_SIZE")
    rank = number("RANK")
    if world < 1 or not 0 <= rank < world:
        raise RankEnvError(f"RANK={rank} and WORLD_SIZE={world} do not describe a rank")
    if not environ.get("MASTER_ADDR"):
        raise unset("MASTER_ADDR")
    number("MASTER_PORT")
    number("GROUP_RANK", 0)
    local_world = number("LOCAL_WORLD_SIZE", world)
    return RankEnv(
        rank=rank,
        world_size=world,
        local_rank=number("LOCAL_RANK", rank % max(local_world, 1)),
        local_world_size=local_world,
        group_dir=environ.get(GROUP_DIR_ENV) or None,
    )

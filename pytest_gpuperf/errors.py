"""The plugin's exceptions and warnings (shown as ``pytest_gpuperf.X``). Each message says
what went wrong and how to fix it."""

from __future__ import annotations


class GpuPerfError(Exception):
    """Base of every error the plugin raises on purpose."""


class GraphCaptureError(GpuPerfError):
    """The benchmarked function cannot be measured with CUDA-graph replay."""


class BenchOutOfMemory(GpuPerfError):
    """CUDA ran out of memory while benchmarking; memory was released."""


class DeviceUnavailable(GpuPerfError):
    """The requested device (``--gpuperf-device=cuda``) cannot be used."""


class DeviceBusy(GpuPerfError):
    """Another process kept the device (its per-device lock) longer than the lock timeout."""


class UnsafePath(GpuPerfError):
    """A lock file or folder that is a link or not a regular file; nothing was written."""


class OutputError(GpuPerfError):
    """An output file (``--gpuperf-json``, a report, ``export -o``) that must not or cannot
    be written there; the message names the option, the path and what to do."""


class GpuPerfWarning(UserWarning):
    """Base of the plugin's warnings (noisy or unstable results, missing tools)."""


# --- baselines -----------------------------------------------------------------


class BaselineError(GpuPerfError):
    """A baseline cannot be read, written or found. Nothing on disk was changed."""


class InvalidBaselineName(BaselineError, ValueError):
    """A baseline name that is not a safe file name."""


class UnknownBaseline(BaselineError, LookupError):
    """No baseline of that name; the message lists those that exist."""

    def __init__(self, name: str, directory: str, existing: list[str]):
        import difflib

        self.existing = list(existing)
        if self.existing:
            close = difflib.get_close_matches(name, self.existing, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            msg = (
                f"no baseline named {name!r} in {directory}; it has: "
                f"{', '.join(self.existing)}.{hint} Pick one of them, or create {name!r} "
                f"with --gpuperf-save={name}."
            )
        else:
            msg = (
                f"no baseline named {name!r}: {directory} holds no baselines yet. "
                f"Create one with --gpuperf-save={name} (or point --gpuperf-baseline-dir, "
                "the CLI's --dir, at the directory that holds them)."
            )
        super().__init__(msg)


class CorruptBaseline(BaselineError):
    """A baseline file that cannot be used as it is; it was left untouched."""

    def __init__(
        self,
        path: str,
        problem: str,
        remedy: str | None = None,
        *,
        where: str = "",
        note: str = "The file was left untouched.",
    ):
        self.path = path
        remedy = remedy or (
            "Restore it from version control (git checkout -- FILE), or delete it and "
            "save the baseline again."
        ).replace("FILE", path)
        super().__init__(f"baseline file {path}{where} cannot be used: {problem}. {note} {remedy}")


class BaselineLocked(BaselineError):
    """Another process kept the baseline locked for longer than the timeout."""


for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, (GpuPerfError, GpuPerfWarning)):
        _cls.__module__ = "pytest_gpuperf"

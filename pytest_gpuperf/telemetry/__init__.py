"""GPU telemetry during measurements (NVML), and what it means for verdicts.

Pure modules (:mod:`.regime`, :mod:`.stream`, :mod:`.reasons`, :mod:`.activity`) serve the
verdict and the reports; NVML adapters (:mod:`.probe`, :mod:`.header`, :mod:`.nvml`,
:mod:`.gpm`) only the pytest shell. Importing this package loads no NVML module.
"""

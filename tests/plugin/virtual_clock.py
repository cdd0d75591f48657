"""A deterministic timer for pytester runs: every call costs exactly 0.5 ms x SLOWDOWN.

Source text, for the conftests the tests write (a pytester run imports its own conftest,
not this package).
"""

TIMER = """
class VirtualClockTimer:
    def __init__(self, call):
        self._call = call
        self.cost_s = 0.0005 * float(os.environ.get("SLOWDOWN", "1"))

    def first_call(self):
        return self.cost_s, self._call()

    def prepare(self):
        pass

    def reset_peak_memory(self):
        pass

    def time_round(self, calls):
        for _ in range(calls):
            self._call()
        return self.cost_s, self.cost_s * calls, calls

    def host_hidden(self, last):
        return None

    def host_time(self, last):
        return None

    def peak_memory(self):
        return 1234

    def close(self):
        pass
"""

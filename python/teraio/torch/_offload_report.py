"""Offloader.report(): the counters of the executor, the bounded steps and the CPU allocator
(Report, one per Offloader)."""
from __future__ import annotations


class Report:
    """Offloader.report(): owns the Offloader's step counters (counts) and those of the bounded
    steps that ended (bounded_done, bounded_peak); build() takes every other number from the
    part that owns it (the executor's counters, the kinds of steps, the planner, the CPU
    settings, the engine, save())."""

    def __init__(self):
        self.counts = dict(steps_profiled=0, steps_offloaded=0, steps_diverged=0,
                           steps_passthrough=0, steps_unplanned=0, replans=0,
                           updates_skipped=0, updates_beyond_plan=0)
        self.bounded_done = dict(offloads=0, bytes_offloaded=0, reads=0, bytes_read=0, io_s=0.0)
        self.bounded_peak = 0

    def bounded_ended(self, b):
        """The bounded path b (teraio.torch._bounded.BoundedMemory) ended: its counters."""
        for k, v in b.stats.items():
            self.bounded_done[k] += v
        self.bounded_peak = max(self.bounded_peak, b.peak_resident)

    @staticmethod
    def _unconstrained_peak(off):
        """The largest unconstrained peak of any kind of step planned so far (the current
        plan's where there is no record of kinds: a plan loaded and not used yet)."""
        peaks = [i["unconstrained_peak_bytes"] for i in off._step_kinds.kinds.values()]
        if off._prog is not None and off._prog.trace is not None:
            peaks.append(off._prog.peak_resident())
        return max(peaks, default=0)

    @staticmethod
    def _budget(off):
        """The budget: with a fraction, the largest of the kinds' budgets (each kind's own is in
        kinds), so that peak_managed_bytes, the highest of all steps, compares with it."""
        p = off._planner
        if p.budget_fraction is None:
            return p.budget
        return max([i["memory_budget"] for i in off._step_kinds.kinds.values()] + [p.budget])

    def build(self, off) -> dict:
        """report() of the Offloader off."""
        ex = off._exec
        st = ex.stats()
        out = {
            "bytes_offloaded": st.get("bytes_offloaded", 0),
            "bytes_prefetched": st.get("bytes_prefetched", 0),
            "stall_s": st.get("stall_s", 0.0) + st.get("pressure_stall_s", 0.0)
            + st.get("demand_stall_s", 0.0),
            "peak_managed_bytes": st.get("peak_resident_bytes", 0),
            "unconstrained_peak_bytes": self._unconstrained_peak(off),
            "memory_budget": self._budget(off),
            "offloads": st.get("offloads", 0),
            "prefetches": st.get("prefetches", 0),
            "urgent_reads": st.get("urgent_reads", 0),
            "demand_offloads": st.get("demand_offloads", 0),
            "bytes_demand_offloaded": st.get("bytes_demand_offloaded", 0),
            "demand_stall_s": st.get("demand_stall_s", 0.0),
            "over_budget_kernels": st.get("over_budget_kernels", 0),
            "deferred_prefetches": st.get("deferred_prefetches", 0),
            "tier_fallbacks": st.get("tier_fallbacks", 0),
            "tier_full_kept": st.get("tier_full_kept", 0),
            "dead_releases": st.get("dead_releases", 0),
            "carried_offloads": st.get("carried_offloads", 0),
            "clean_offloads": st.get("clean_offloads", 0),
            "host_copies_dropped": st.get("host_copies_dropped", 0),
            "io_issue_s": st.get("io_issue_s", 0.0),
        }
        for why in ("read", "write", "budget", "end", "other"):  # the training thread's waits
            out[f"wait_{why}_count"] = st.get(f"wait_{why}_count", 0)
            out[f"wait_{why}_s"] = st.get(f"wait_{why}_s", 0.0)
        bs = dict(self.bounded_done)
        bpeak = self.bounded_peak
        if off._bounded is not None:
            for k, v in off._bounded.stats.items():
                bs[k] += v
            bpeak = max(bpeak, off._bounded.peak_resident)
        out["unplanned_peak_bytes"] = bpeak  # warm-up and profiled steps, tracked (>= min size)
        out["unplanned_bytes_offloaded"] = bs["bytes_offloaded"]
        out["unplanned_bytes_read"] = bs["bytes_read"]
        out["unplanned_io_s"] = bs["io_s"]
        out.update(self.counts)
        # save(): the most bytes of globals in memory at once while it ran (those that stay in
        # memory between steps, and the offloaded one being written)
        out["save_peak_bytes"] = off._saver.peak
        rt = ex.runtime
        out["kinds"] = off._step_kinds.report(
            ex.key if rt is not None else None,
            rt.stats()["peak_resident_bytes"] if rt is not None else 0)
        out.update(off._cpu.report())
        if off._plan is not None:
            out["plan"] = off._plan.summary()
            out["predicted_step_s"] = off.predicted_step_s()
        if off._engine is not None:
            out["engine"] = off._engine.stats()
            # transfers retried after a transient failure / a checksum mismatch (verify): each
            # also logged on the "teraio" logger at the end of its step
            out["io_retries"] = out["engine"]["retries"]
            out["io_crc_errors"] = out["engine"]["crc_errors"]
        p = off._planner
        if p.ssd_dirs:
            out["ssd_read_Bps"] = p.ssd_read_Bps  # what the planner assumed, per directory
            out["ssd_write_Bps"] = p.ssd_write_Bps
            out["ssd_bandwidth_measured"] = p.ssd_auto
        return out

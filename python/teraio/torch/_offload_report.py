"""Offloader.report(): the counters of the executor, the bounded steps and the CPU allocator
(teraio.torch.offload)."""
from __future__ import annotations

from teraio import _core
from teraio.torch._cpu_memory import _torch_alloc


class Report:
    """Offloader methods: report()."""

    def _report_kinds(self):
        """One entry per kind of step that has had a plan: its budget (a fraction budget is
        each kind's fraction of its own unconstrained peak), unconstrained peak, the highest
        tracked peak of its executed steps, how many of them ran planned."""
        kinds = []
        for key, info in self._kinds.items():
            row = dict(info)
            if self._runtime is not None and key == self._rt_key:
                row["peak_managed_bytes"] = max(row["peak_managed_bytes"],
                                                self._runtime.stats()["peak_resident_bytes"])
            kinds.append(row)
        return kinds

    def _unconstrained_peak(self):
        """The largest unconstrained peak of any kind of step planned so far (the current
        plan's where there is no record of kinds: a plan loaded and not used yet)."""
        peaks = [i["unconstrained_peak_bytes"] for i in self._kinds.values()]
        if self._prog is not None and self._prog.trace is not None:
            peaks.append(self._prog.peak_resident())
        return max(peaks, default=0)

    def _report_budget(self):
        """The budget: with a fraction, the largest of the kinds' budgets (each kind's own is in
        kinds), so that peak_managed_bytes, the highest of all steps, compares with it."""
        if self.budget_fraction is None:
            return self.budget
        return max([i["memory_budget"] for i in self._kinds.values()] + [self.budget])


    def report(self) -> dict:
        """Counters so far: bytes_offloaded, bytes_prefetched, stall_s, peak_managed_bytes,
        steps_profiled, steps_offloaded, and more."""
        st = dict(self._stats_done)
        if self._runtime is not None:
            cur = self._runtime.stats()
            for k, v in cur.items():
                if k == "peak_resident_bytes":
                    st[k] = max(st.get(k, 0), v)
                elif k != "resident_bytes":
                    st[k] = st.get(k, 0) + v
        out = {
            "bytes_offloaded": st.get("bytes_offloaded", 0),
            "bytes_prefetched": st.get("bytes_prefetched", 0),
            "stall_s": st.get("stall_s", 0.0) + st.get("pressure_stall_s", 0.0)
            + st.get("demand_stall_s", 0.0),
            "peak_managed_bytes": st.get("peak_resident_bytes", 0),
            "unconstrained_peak_bytes": self._unconstrained_peak(),
            "memory_budget": self._report_budget(),
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
            "io_issue_s": st.get("io_issue_s", 0.0),
        }
        for why in ("read", "write", "budget", "end", "other"):  # the training thread's waits
            out[f"wait_{why}_count"] = st.get(f"wait_{why}_count", 0)
            out[f"wait_{why}_s"] = st.get(f"wait_{why}_s", 0.0)
        bs = dict(self._bounded_done)
        bpeak = self._bounded_peak
        if self._bounded is not None:
            for k, v in self._bounded.stats.items():
                bs[k] += v
            bpeak = max(bpeak, self._bounded.peak_resident)
        out["unplanned_peak_bytes"] = bpeak  # warm-up and profiled steps, tracked (>= min size)
        out["unplanned_bytes_offloaded"] = bs["bytes_offloaded"]
        out["unplanned_bytes_read"] = bs["bytes_read"]
        out["unplanned_io_s"] = bs["io_s"]
        out.update(self._counts)
        # save(): the most bytes of globals in memory at once while it ran (those that stay in
        # memory between steps, and the offloaded one being written)
        out["save_peak_bytes"] = self._save_peak
        out["kinds"] = self._report_kinds()
        out["cpu_mmap_threshold"] = self.cpu_mmap_threshold
        out["cpu_prefault"] = bool(self.cpu_allocator and self.cpu_prefault)
        out["cpu_allocator"] = None
        if self.cpu_allocator:
            out["cpu_allocator"] = _core.block_cache_stats()
            ta = _torch_alloc()
            out["cpu_allocator"]["fallbacks"] = ta.fallbacks() if ta else 0
            out["cpu_allocator"]["installed"] = bool(self._alloc_installed and ta
                                                     and ta.installed())
        if self._plan is not None:
            out["plan"] = self._plan.summary()
            out["predicted_step_s"] = self.predicted_step_s()
        if self._engine is not None:
            out["engine"] = self._engine.stats()
            # transfers retried after a transient failure / a checksum mismatch (verify): each
            # also logged on the "teraio" logger at the end of its step
            out["io_retries"] = out["engine"]["retries"]
            out["io_crc_errors"] = out["engine"]["crc_errors"]
        if self.ssd_dirs:
            out["ssd_read_Bps"] = self.ssd_read_Bps  # what the planner assumed, per directory
            out["ssd_write_Bps"] = self.ssd_write_Bps
            out["ssd_bandwidth_measured"] = self.ssd_auto
        return out

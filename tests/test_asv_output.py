"""asv's output with skips folded: each skip reason once per benchmark class, every measured
figure and every failure kept."""
from harness.drive.asv.asv_output import EARLIER, THIS_RUN, fold

GPU = "needs 1 GPU(s), this box has no GPU; run it on a box with 1 or more"


def skipped_method(pct, name, params):
    lines = [f"[{pct}] ··· {name}                      ok", f"[{pct}] ··· ======= =====", "              probe      ",
             "             ------- -----"]
    lines += [f"              {p}   n/a " for p in params] + ["             ======= =====", ""]
    for p in params:
        lines += [f"[{pct}] ···· For parameters: '{p}'", f"              oombench: skipped: {GPU}",
                  f"              asv: skipped: NotImplementedError('{GPU}')", ""]
    return lines


def test_a_class_skipped_everywhere_is_one_line_whatever_its_methods_and_parameter_sets():
    lines = (["· Discovering benchmarks"] + skipped_method("10.00%", "ceilings.Device.track_peak_device_bytes", "abc")
             + skipped_method("20.00%", "ceilings.Device.track_seconds_per_step", "abc"))
    out = list(fold(lines))
    assert out == ["· Discovering benchmarks", f"skipped ceilings.Device: {GPU}"]


def test_measured_figures_stay_and_the_skipped_sets_beside_them_are_counted_once():
    lines = skipped_method("30.00%", "tricks.TricksCpu.track_seconds_per_step", ["fp32", "tf32"])
    lines[4] = "              fp32   1.69s "  # the first set was measured in this run
    lines[8:12] = ["[30.00%] ···· For parameters: 'fp32'", f"              {THIS_RUN}", ""]  # so it has no skip lines
    out = list(fold(lines))
    assert "              fp32   1.69s " in out and not any(THIS_RUN in line for line in out)
    assert out[-1] == f"             1 parameter set(s) skipped: {GPU}"
    assert not any("oombench: skipped" in line or "asv: skipped" in line for line in out)


def test_a_failure_is_never_folded():
    lines = ["[40.00%] ··· tricks.Techniques.track_seconds_per_step        failed",
             "[40.00%] ···· For parameters: 'lm'", "              Traceback (most recent call last):",
             "              RuntimeError: loss is nan at step 3", ""]
    out = list(fold(lines))
    assert out[0].endswith("failed") and "              RuntimeError: loss is nan at step 3" in out


def test_an_unparameterised_skip_and_a_plain_figure():
    lines = ["[50.00%] ··· parallel.LmSingle.track_seconds_per_step     n/a",
             f"[50.00%] ···· oombench: skipped: {GPU}", f"              asv: skipped: NotImplementedError('{GPU}')", "",
             "[60.00%] ··· parallel.LmCpuSingle.track_seconds_per_step  594ms"]
    assert list(fold(lines)) == [f"skipped parallel.LmSingle: {GPU}",
                                 "[60.00%] ··· parallel.LmCpuSingle.track_seconds_per_step  594ms"]


def test_a_figure_an_earlier_run_left_beside_this_runs_is_marked_as_older():
    lines = ["[70.00%] ··· tricks.Techniques.track_seconds_per_step          ok",
             "[70.00%] ··· ====== =============== =======", "              workload   technique          ",
             "             ------ --------------- -------",
             "                lm         fp32        455ms ", "                lm     bf16_autocast   77.0ms ",
             "             ====== =============== =======", "",
             "[70.00%] ···· For parameters: 'lm', 'fp32'", f"              {THIS_RUN}", ""]
    out = list(fold(lines))
    assert "                lm         fp32        455ms " in out  # measured now: as asv printed it
    assert "                lm     bf16_autocast   77.0ms" + EARLIER in out
    assert not any(THIS_RUN in line for line in out)

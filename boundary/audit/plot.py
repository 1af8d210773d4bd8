"""The audit as a PNG: reuse rate and mean reused tokens per checkpoint kind, for the trace as
given and for each what-if re-run.

Where it sits: the end of the audit: it draws ``records``; nothing reads it back.
"""

from __future__ import annotations

from pathlib import Path

from boundary.audit.records import KINDS, AuditReport

_NAMES = {"prompt_end": "P_end", "input_end": "U_end", "decode_end": "D_end"}


def write_plot(report: AuditReport, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [("as given", report.summary)] + [
        (w.name, w.summary) for w in report.what_if if w.summary is not None
    ]
    fig, (rates, tokens) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(runs)
    for i, (name, summary) in enumerate(runs):
        xs = [k + (i - (len(runs) - 1) / 2) * width for k in range(len(KINDS))]
        rates.bar(xs, [100 * summary.kinds[k].rate for k in KINDS], width, label=name)
        tokens.bar(xs, [summary.kinds[k].mean_reused_tokens for k in KINDS], width, label=name)
    for ax, ylabel in ((rates, "reused by the next request (%)"), (tokens, "mean tokens reused")):
        ax.set_xticks(range(len(KINDS)), [_NAMES[k] for k in KINDS])
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    rates.set_ylim(0, 100)
    handles, labels = rates.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(runs), 3), fontsize=8, frameon=False)
    fig.suptitle(
        f"Round-trip audit: {report.family} ({report.variant}), {report.summary.turns} turns, "
        f"unit {report.unit}"
    )
    fig.tight_layout(rect=(0, 0.06 * ((len(runs) + 2) // 3), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)

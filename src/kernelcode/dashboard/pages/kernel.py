"""The page of one kernel (``/kernel/<id>``): every recorded field, linkable from anywhere."""

from __future__ import annotations

from dash import dcc, html

from kernelcode.dashboard.components import kernel_panel, message_page


def layout(source, kernel_id: str):
    """Everything recorded for one kernel, or a clear message for an unknown id."""
    kernel = source.kernel(kernel_id)
    if kernel is None:
        return message_page("Unknown kernel", f"No kernel with id {kernel_id!r} in this database.")
    from kernelcode.dashboard.app import job_path

    return html.Div([
        dcc.Link(f"back to {kernel['task_name']} / {kernel['job_name']}",
                 href=job_path(kernel["task_name"], kernel["job_name"])),
        kernel_panel(kernel),
    ], className="kernel-page")


def register(app, source) -> None:
    """The kernel page is static: nothing to register (kept for symmetry with the others)."""

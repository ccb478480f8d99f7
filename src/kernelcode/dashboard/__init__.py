"""The results browser and live dashboard (Plotly Dash), read-only over the results database.

``create_app`` builds the app; ``serve_in_background`` and ``job_url`` are what the TUI's ``d``
key uses; ``kernelfoundry-gui`` (``cli.main``) serves it in the foreground.
"""

from kernelcode.dashboard.app import create_app, job_path
from kernelcode.dashboard.server import job_url, serve_in_background

__all__ = ["create_app", "job_path", "job_url", "serve_in_background"]

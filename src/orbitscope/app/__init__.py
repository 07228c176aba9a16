"""The interactive NERO interface in the browser (``orbitscope serve``).

NERO's three levels, linked (Zhao et al., arXiv 2305.19889): aggregate NERO plots of the compared
models → a dimension-reduction scatter per model with ranking sliders → the individual NERO plot
of the selected sample → a detail view of the transformed input and the models' outputs, with
live re-evaluation at any element. It only reads the store (see :mod:`.data`); the labelling
view at ``/label/`` (:mod:`.labelling`) records human invariance labels in the store's model
database, the interface's only write.

Structure: :mod:`.state` (the selection and the pure functions that change it), :mod:`.data`
(cached read-only store access), :mod:`.callbacks` (one plain function per interaction),
:mod:`.layout` (the page), :mod:`.server` (Dash wiring and serving) and :mod:`.views` (the
task-specific detail panels behind :class:`~orbitscope.app.views.TaskView`).
"""

from .data import AppData, AppError
from .server import bind_warning, create_app, make_server, serve
from .state import Event, Selection
from .views import VIEWS, DetailRequest, TaskView, list_views, register_view, view_for

__all__ = [
    "AppData",
    "AppError",
    "DetailRequest",
    "Event",
    "Selection",
    "TaskView",
    "VIEWS",
    "bind_warning",
    "create_app",
    "list_views",
    "make_server",
    "register_view",
    "serve",
    "view_for",
]

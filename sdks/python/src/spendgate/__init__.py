"""spendgate: the Python client of the spendgate gateway.

Report cost events (one at a time or through a background :class:`CostBatcher`),
ask a human before an action and report its outcome, bind and gate end customers,
and read budget status, policy and the key's identity::

    from spendgate import Spendgate

    sg = Spendgate()  # SPENDGATE_API_KEY, SPENDGATE_BASE_URL, SPENDGATE_PROXY_URL

    @sg.requires_approval(agent_id="mailer", action_type="send_email")
    def send_email(to: str, body: str) -> dict:
        ...

:class:`AsyncSpendgate` offers the same calls for ``asyncio``.
"""

from ._version import __version__
from .aio import AsyncSpendgate
from .batcher import CostBatcher
from .client import ApprovedAction, Spendgate
from .errors import *  # noqa: F401,F403
from .errors import ERROR_CLASSES
from .models import (
    Action,
    BatchReceipt,
    Binding,
    BudgetEntityStatus,
    CostEvent,
    CostEventReceipt,
    GateDecision,
    GateRecovery,
    Introspection,
    ModelPrice,
    Policy,
    ProviderSettings,
    UnitEconomics,
)

__all__ = [
    "__version__",
    "Spendgate",
    "AsyncSpendgate",
    "CostBatcher",
    "ApprovedAction",
    "Action",
    "BatchReceipt",
    "Binding",
    "BudgetEntityStatus",
    "CostEvent",
    "CostEventReceipt",
    "GateDecision",
    "GateRecovery",
    "Introspection",
    "ModelPrice",
    "Policy",
    "ProviderSettings",
    "UnitEconomics",
    "ERROR_CLASSES",
    "error_from_response",
    "SpendgateError",
    "SpendgateAPIError",
    "SpendgateConnectionError",
    "ActionRejectedError",
    "ActionExpiredBeforeDecisionError",
    "ApprovalTimeoutError",
    "QueueFullError",
    *sorted({cls.__name__ for cls in ERROR_CLASSES.values()}),
]

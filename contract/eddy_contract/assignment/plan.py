"""One pass of the assignor's rules, in order: stateful actives' targets, the actives that can
move there now, stateless actives, standbys, and warmups for every move that has to wait."""

from __future__ import annotations

from eddy_contract.assignment.active_targets import target_actives
from eddy_contract.assignment.app_tasks import AppTasks
from eddy_contract.assignment.client_state import ClientState
from eddy_contract.assignment.model import AssignorSettings, TaskAssignment
from eddy_contract.assignment.standbys import place_standbys
from eddy_contract.assignment.stateless import place_stateless
from eddy_contract.assignment.task_movement import PlannedMove, actual_actives, place_warmups
from eddy_contract.tasks import Role


def plan(tasks: AppTasks, clients: ClientState, settings: AssignorSettings) -> dict[str, TaskAssignment]:
    """Where every task's copies go, given the clients' state (which holds the previous result)."""
    target = target_actives(tasks, clients)
    active = actual_actives(target, clients)
    stateless = place_stateless(tasks, clients, active)
    active.update(stateless)
    target.update(stateless)
    active_moves = [PlannedMove(t, target[t], Role.ACTIVE) for t in tasks.ordered if active[t] != target[t]]
    standbys, standby_moves = place_standbys(tasks, clients, active, target, settings.standby_replicas)
    warmups = place_warmups([*active_moves, *standby_moves], active, standbys, clients,
                            settings.max_warmup_replicas)
    return {t: TaskAssignment(active[t], tuple(sorted(standbys.get(t, ()))), tuple(sorted(warmups.get(t, ()))))
            for t in tasks.ordered}

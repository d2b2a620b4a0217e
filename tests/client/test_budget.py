"""WaitBudget: one flush timeout shared by the waits for a server that does not deliver."""

from __future__ import annotations

from trainjob_status.budget import WaitBudget


def test_a_fresh_budget_allows_the_whole_wait() -> None:
    assert WaitBudget().allowance(5.0, 5.0) == 5.0
    assert WaitBudget().allowance(2.0, 5.0) == 2.0  # a shorter wait asked for


def test_a_wait_in_vain_leaves_only_the_rest() -> None:
    budget = WaitBudget()
    budget.spend(3.0)
    assert budget.allowance(5.0, 5.0) == 2.0
    budget.spend(2.5)
    assert budget.allowance(5.0, 5.0) == 0.0
    assert budget.allowance(0.0, 5.0) == 0.0


def test_a_delivery_restores_the_budget() -> None:
    budget = WaitBudget()
    budget.spend(5.0)
    budget.restore()
    assert budget.allowance(5.0, 5.0) == 5.0


def test_a_negative_spend_refunds_nothing() -> None:
    budget = WaitBudget()
    budget.spend(-1.0)  # a clock that stepped back
    assert budget.allowance(5.0, 5.0) == 5.0


def test_a_larger_flush_timeout_set_later_counts_from_what_was_spent() -> None:
    budget = WaitBudget()
    budget.spend(5.0)
    assert budget.allowance(10.0, 8.0) == 3.0

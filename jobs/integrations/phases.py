"""Goodput marks from a framework's hooks (docs/goodput.md), where the start and the end of an
evaluation or a save come from different hooks: Trainer says at the end of a step that it will
evaluate and save (`control.should_evaluate`, `control.should_save`), then that it evaluated
(`on_evaluate`) and saved (`on_save`); Lightning says when validation starts and ends. No
framework is imported here."""

from jobs.runtime.marks import CHECKPOINT_SAVE, EVAL, end_mark, is_marking, start_mark


class TrainerPhases:
    """The marks of a loop that announces its evaluations and saves before making them."""

    def step_ended(self, *, will_evaluate: bool, will_save: bool) -> None:
        if will_evaluate:
            start_mark(EVAL)
        if will_save:
            start_mark(CHECKPOINT_SAVE)

    def predicting(self) -> None:
        """An evaluation batch: an evaluation not announced (`trainer.evaluate()`) starts."""
        if not is_marking(EVAL):
            start_mark(EVAL)

    def evaluated(self, step: int | None, *, will_save: bool) -> None:
        end_mark(EVAL, step)
        if will_save:  # the save comes after the evaluation
            start_mark(CHECKPOINT_SAVE)

    def saved(self, step: int | None) -> None:
        end_mark(CHECKPOINT_SAVE, step)


phases = TrainerPhases()

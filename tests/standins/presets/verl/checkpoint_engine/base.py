"""Stand-in for verl's ``verl/checkpoint_engine/base.py`` of a version whose manager has no
``update_weights`` (the preset must say so, not fail)."""


class CheckpointEngineManager:
    def sync(self) -> None:
        return None

"""The planner's parts. Planner (localspec/planner.py) is one class in several files, and these
modules hold the rest of it: plans (Plan, Choice, cap_of), budget (ExploreBudget), probes (pricing a
probe, and the rests of what lost), record (learning from what a step measured) and handoff (the
hybrid's Handoff). The package re-exports nothing: each name is imported from its own module."""

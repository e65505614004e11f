"""The names of ``ctxpress bench``'s scenarios (what each does: ``ctxpress.evaluation.bench``), apart
so that the command line lists them without importing the benchmark."""

SCENARIOS = ("short", "long", "file_switch", "concurrency", "typing", "team", "reopen", "jump", "load", "shards",
             "kernels", "accept", "host", "fairness")
# team needs two server set-ups; reopen measures the engine's disk tier, not a mode; jump compares prompt
# layouts (--jump-layout); load is a team's load; shards starts the team topology of infra/ as processes; kernels
# measures the engine's CPU kernel paths, without the appliance; host runs kernels, typing, jump, accept and load
# one after the other and puts their figures beside the goals (host_report.py); fairness starts a two-user team
# appliance of its own (fairness_bench.py)
DEFAULT_SCENARIOS = ("short", "long", "file_switch", "concurrency", "typing")

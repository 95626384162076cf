"""The loop's shared vocabulary, below every stage: the enums of its closed sets (what a task
tunes and how it ended, what a hit, a failure and a decision come to, a flag's type and channel)
and the value types every stage shares (a figure with its confidence interval, an error told in
one line). It imports nothing of the project: any package may import it."""

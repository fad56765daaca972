"""``maskwise ablate NAME``: change one design choice, hold the rest, and let a coded rule judge a prediction.

Every ablation pretrains small models on one of ``compare``'s recipes (the same block for every
family, so only the attention mask, the loss or the one knob under study differs) for several seeds,
fine-tunes them with that recipe's task settings, and writes ``results.json`` plus the report of
``report.py``. Each arm is measured on two axes, always both:

* **equal tokens**: every arm pretrains with the budget ``tokens=N`` (encoder plus decoder tokens
  read; the scale's, or fewer when an arm is costlier, below), so each has seen the same amount of text;
* **equal wall-clock**: for each seed, the arm that needed the least training time T keeps its run,
  and every other arm that needed more than T plus ``arms.WALL_TOLERANCE`` (5%, the machine's
  run-to-run noise) is pretrained again from scratch with the budget ``seconds=T`` (its own
  complete learning-rate schedule, not a truncated one); everything downstream is measured again
  on those runs. Arms of equal cost per token therefore usually share their runs between the axes.
  Wall-clock is training time only, on a shared machine, so it carries the noise of
  whatever else ran at the time; the tokens/s rows show how large the speed gap was.
* an arm declared **costlier** (``Arm.costlier``: ELECTRA, whose generator runs beside the encoder)
  pretrains only with ``seconds=T``, and the equal-tokens axis is at the tokens it read in T: the
  other arms pretrain again with that budget. Its extra run is the cheap arm's shorter one, not the
  costly arm's longer one; the tokens-seen rows show the count.
* an arm with a phase **before** (``Arm.before``: cross-objective, clm-then-mlm) spends its budget in
  two runs, another objective on its share, then its own from those weights on the rest (``init_from``);
  both axes read the two runs' totals (``tokens_seen_total``, ``wall_s_total``), and a wall-clock rerun
  reruns both.

A prediction is judged by a rule coded in each study's ``judge`` method that reads nothing but the per-seed
numbers of its measures: a small dataclass per study (``jobs.JobScores`` for a job's: each arm's score beside the
trivial baseline and the untrained control), whose JSON is ``results["metrics"]``. Comparisons use
``verdict.compare`` (paired by seed: the 95% t-interval of the per-seed differences; one that includes zero is
"within noise", with the seeds it would take to resolve). The rule runs on each axis; the verdict is
their common outcome, and ``inconclusive`` when the axes disagree (a claim that holds at equal
tokens but not at equal time is not established). ``metrics`` holds exactly what the rules read
(it is also what the bar charts show); the table holds those and everything else measured.

Scales (``recipes.SCALES``, ``scale=`` here, ``--scale`` on the command line): ``default`` is
compare's default recipe at the tokens its wall-clock budget reads on 2 CPU cores, ``quick`` and
``gpu`` compare's scales of those names, and ``smoke`` a few steps that only check the plumbing (the
tests use it); its reports say so in the title, and its numbers mean nothing.

Each ablation is one module with a subclass of ``framework.Study`` (arms from its ``StudyOptions``, what it
measures, its measures, its rule, its summary sentence) and one line of ``registry.ABLATIONS``;
``framework.conduct`` runs it.

Finished steps are cached by ``Experiment``, so an interrupted ablation continues where it stopped;
an output folder remembers its recipe (ablation, scale, model and fine-tuning settings) and refuses
to mix in another.
"""

"""Per-call time against the number of calls: the rule (:mod:`.rule`), its findings' evidence
(:mod:`.record`) and how they read as diagnoses (:mod:`.cause`)."""

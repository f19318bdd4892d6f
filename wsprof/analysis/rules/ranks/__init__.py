"""A rank whose weight sync or own time stands out from its world's: the rule
(:mod:`.rule`), its finding's evidence (:mod:`.record`) and how it reads as a diagnosis
(:mod:`.cause`)."""

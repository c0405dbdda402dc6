"""Answers made of more than one engine call: long texts in sentence segments
(:mod:`.segments`, :mod:`.readings`), finished and levelled (:mod:`.assemble`,
:mod:`.loudness`), templates composed from cached pieces (:mod:`.templates`,
:mod:`.templatebook`, :mod:`.refine`), and the composer that makes them
(:mod:`.composer`). Nothing here is re-exported: import the module you need."""

"""Work over a phrase list on top of the service: the preload, the export, and batch jobs
(``POST /api/batch``, made in the background by every replica)."""

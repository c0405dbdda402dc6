"""A request: its typed form, its validation, the access policy that decides who may make it, and phrase lists."""

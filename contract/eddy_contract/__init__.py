"""The contract the operator and the runtime share: the `StreamApp` spec model (`spec`), task ids
(`tasks`), the assignor both run (`assignor`) and the messages of the channel between them
(`channel`). Pure values and functions; neither half's package is imported here.

See docs/DESIGN.md ("Components and folders").
"""

"""The backends of the `Table` (`orbital.store.table`) and `Workspace` (`orbital.store.workspace`) ports, side by side.

dynamo.py       DynamoTable: the table in DynamoDB (AWS)
sqlite.py       SqliteTable: the table in one SQLite file (the local gateway), over database.py
s3.py           S3Workspace: the workspace in an S3 bucket (AWS)
files.py        FileWorkspace: the workspace in plain files (the local gateway), with signed_urls.py
database.py     the SQLite connection: one writer, acknowledged means on disk
signed_urls.py  the presigned URLs of the file workspace
private.py      files and directories only their owner reads, and the data directory's lock
"""

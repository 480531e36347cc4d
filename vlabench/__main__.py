from vlabench.cli.app import app

app(prog_name="vlabench")

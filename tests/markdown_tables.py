"""Reading the tables of the generated Markdown pages, for the tests of the
scripts that write them (sweep_test.py, report_test.py)."""


def table_rows(text, heading):
    """The body rows of the first table after `heading`, as lists of cells."""
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]

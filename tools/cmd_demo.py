"""Placeholder: `mxidx demo` is being written."""
import click


@click.command()
def demo():
    """Not available yet."""
    raise click.ClickException("mxidx demo is not available yet")

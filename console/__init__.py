"""What every stage shows the person at the terminal, below every stage: the progress bar
(`console.progress`). It imports nothing of the project: any package may import it."""

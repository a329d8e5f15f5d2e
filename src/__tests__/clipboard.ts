/**
 * The async Clipboard API of the pages JupyterLab runs in (localhost is a secure
 * context), which jsdom lacks: without it @jupyterlab/apputils warns "Clipboard API
 * not available" when it is imported. Text only, kept in memory (a jest setup file).
 */
let copied = '';

Object.defineProperty(navigator, 'clipboard', {
  configurable: true,
  value: {
    readText: async (): Promise<string> => copied,
    writeText: async (text: string): Promise<void> => {
      copied = text;
    }
  }
});

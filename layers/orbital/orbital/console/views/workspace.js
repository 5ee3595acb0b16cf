// PLACEHOLDER: replaced by the real view.
import { header } from "../ui.js";

export default {
  id: "workspace",
  title: "Workspace",
  icon: "workspace",
  mount(container) {
    container.append(header("Workspace"));
    return () => {};
  },
};

// PLACEHOLDER: replaced by the real view.
import { header } from "../ui.js";

export default {
  id: "nodes",
  title: "Nodes",
  icon: "nodes",
  mount(container) {
    container.append(header("Nodes"));
    return () => {};
  },
};
